"""Reference solution: the GRPO objective on one group of toy numbers."""

import numpy as np


def grpo_objective(rhos, A, pi_theta_old, pi_theta_ref, epsilon=0.2, beta=0.01) -> float:
    """Clipped surrogate averaged over the group, minus beta times KL(pi_theta || pi_ref)."""
    rhos = np.asarray(rhos, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    pi_old = np.asarray(pi_theta_old, dtype=np.float64)
    pi_ref = np.asarray(pi_theta_ref, dtype=np.float64)
    if not len(rhos) == len(A) == len(pi_old) == len(pi_ref):
        raise ValueError(
            f"rhos, A, pi_theta_old and pi_theta_ref must have the same length, got "
            f"{len(rhos)}, {len(A)}, {len(pi_old)} and {len(pi_ref)}"
        )

    unclipped = rhos * A
    clipped = np.clip(rhos, 1 - epsilon, 1 + epsilon) * A
    # The minimum makes the objective pessimistic: clipping can only remove incentive.
    surrogate = np.mean(np.minimum(unclipped, clipped))

    # rho = pi_theta / pi_old, so the current policy is rho * pi_old, renormalized.
    pi_theta = rhos * pi_old
    pi_theta = pi_theta / pi_theta.sum()
    pi_ref = pi_ref / pi_ref.sum()
    kl = np.sum(pi_theta * np.log(pi_theta / pi_ref + 1e-10))

    return float(surrogate - beta * kl)
