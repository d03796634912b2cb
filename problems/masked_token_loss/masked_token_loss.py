"""Problem: the masked token loss. Read README.md, then replace the bodies below."""

import numpy as np  # noqa: F401 - you will need it


def per_token_loss(
    logp, logp_old, logp_ref, advantages, mask=None, epsilon=0.2, beta=0.04, epsilon_high=None
):
    """Return the (B, T) per-token GRPO loss, exactly 0 where `mask` is 0.

    Per token: -(min(rho * A, clip(rho, 1 - epsilon, 1 + epsilon_high) * A) - beta * k3), with
    rho = exp(logp - logp_old), k3 = r - log r - 1 and r = exp(logp_ref - logp).
    Values where `mask` is 0 may be garbage (inf, nan) and must not reach the result.
    """
    raise NotImplementedError("per_token_loss is not implemented yet: write its body")


def aggregate_loss(per_token, mask, aggregation="sequence", max_len=None, normalizer=None):
    """Return the (B, T) token losses averaged as `aggregation` says, as a 0-d array.

    "sequence": mean over completions of (masked token sum / max(token count, 1)).
    "token":    masked token sum over the batch / max(total token count, 1).
    "constant": masked token sum / (B * max_len), max_len defaulting to T.
    `normalizer`, when given, replaces the denominator (B, the token count, or B * max_len).
    """
    raise NotImplementedError("aggregate_loss is not implemented yet: write its body")


def masked_token_loss(
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
):
    """Return the GRPO loss (to minimize) of a batch of B completions of T tokens.

    Args:
        logp: (B, T) log-probs of the completion tokens under the current policy.
        logp_old: (B, T) log-probs under the policy that sampled the completions.
        logp_ref: (B, T) log-probs under the frozen reference policy.
        advantages: (B,) one advantage per completion.
        mask: (B, T) 1 for completion tokens, 0 for padding (ints, floats or bools).
        epsilon: the lower clip range, and the upper one unless epsilon_high is given.
        beta: the weight of the k3 KL penalty.
        aggregation: "sequence", "token" or "constant".
        epsilon_high: the upper clip range; None means epsilon.
        max_len: L_max of the "constant" aggregation; None means T.

    Returns:
        The loss as a Python float.

    Raises:
        ValueError: on mismatched shapes (advantages must be exactly (B,)), an unknown
            aggregation, a mask that is not 0/1, or max_len < T.
    """
    raise NotImplementedError("masked_token_loss is not implemented yet: write its body")
