"""Problem: the GRPO objective. Read README.md, then replace the body below."""

import numpy as np  # noqa: F401 - you will need it


def grpo_objective(rhos, A, pi_theta_old, pi_theta_ref, epsilon=0.2, beta=0.01) -> float:
    """Return the GRPO objective of one group of G outputs (to be maximized).

    Args:
        rhos: the G probability ratios pi_theta(o_i) / pi_theta_old(o_i).
        A: the G advantages.
        pi_theta_old: the G probabilities of the outputs under the old policy.
        pi_theta_ref: the G probabilities of the outputs under the reference policy.
        epsilon: the clipping range; ratios are clipped to [1 - epsilon, 1 + epsilon].
        beta: the weight of the KL penalty.

    Returns:
        The objective as a Python float (computed in float64).

    Raises:
        ValueError: unless the four sequences are all 1-D with one same length G >= 1.
    """
    raise NotImplementedError("grpo_objective is not implemented yet: write its body")
