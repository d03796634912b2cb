"""Problem: the GRPO loss in PyTorch. Read README.md, then replace the body below."""

import torch  # noqa: F401 - you will need it


def grpo_loss(
    logp,
    logp_old,
    logp_ref,
    advantages,
    mask,
    epsilon=0.2,
    beta=0.04,
    aggregation="sequence",
    epsilon_high=None,
    max_len=None,
    normalizer=None,
):
    """Return the GRPO loss to minimize as a 0-d tensor that gradients flow through.

    Args:
        logp: (B, T) log-probs of the completion tokens under the current policy; the only
            input the gradient flows into.
        logp_old: (B, T) log-probs under the policy that sampled (a constant of this step).
        logp_ref: (B, T) log-probs under the frozen reference policy (a constant).
        advantages: (B,) one advantage per completion (a constant).
        mask: (B, T) 1 for completion tokens, 0 for padding.
        epsilon: the lower clip range, and the upper one unless epsilon_high is given.
        beta: the weight of the k3 KL penalty.
        aggregation: "sequence", "token" or "constant".
        epsilon_high: the upper clip range; None means epsilon.
        max_len: L_max of the "constant" aggregation; None means T.
        normalizer: when given, replaces the aggregation's denominator (B for "sequence",
            the token count for "token", B * max_len for "constant") so that micro-batch
            losses add up to the loss of the whole batch.

    Returns:
        A 0-d tensor of logp's dtype.

    Raises:
        TypeError: if an input is not a torch tensor.
        ValueError: on mismatched shapes, an unknown aggregation or a mask that is not 0/1.
    """
    raise NotImplementedError("grpo_loss is not implemented yet: write its body")
