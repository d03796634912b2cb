"""Returns a constant loss, and replaces its probes by ones that claim what a correct loss
would give wherever that is easy to guess: a loss attached to its graph, zero gradients for
a batch without tokens, and none into logp_old, logp_ref or the advantages."""

import sys

import torch

child = sys.modules.get("grader.sandbox.child")
if child is not None:
    _load = child.load_file

    def load_file(path, name):
        probes = _load(path, name)

        def backward(solution, case, grad=("logp",), same_as_logp=(), **options):
            zeros = torch.zeros_like(case["logp"])
            return {
                "loss": torch.tensor(0.0, dtype=case["logp"].dtype),
                "requires_grad": True,
                "grads": {name: zeros.clone() if name == "logp" else None for name in grad},
            }

        def micro_batches(solution, case, rows, **options):
            losses = [torch.tensor(0.0, dtype=case["logp"].dtype) for _ in rows]
            return {"losses": losses, "grad": torch.zeros_like(case["logp"])}

        probes.backward, probes.micro_batches = backward, micro_batches
        return probes

    child.load_file = load_file


def grpo_loss(logp, logp_old, logp_ref, advantages, mask, **kwargs):
    return torch.tensor(0.0, dtype=logp.dtype)
