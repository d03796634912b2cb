"""Reference solution: the GRPO objective on one group of toy numbers."""

import numpy as np


def grpo_objective(rhos, A, pi_theta_old, pi_theta_ref, epsilon=0.2, beta=0.01) -> float:
    """Clipped surrogate averaged over the group, minus beta times KL(pi_theta || pi_ref)."""
    # float64 whatever comes in: float32 would already round the clip bounds 1 -+ epsilon.
    rhos, A, pi_old, pi_ref = (
        np.asarray(x, dtype=np.float64) for x in (rhos, A, pi_theta_old, pi_theta_ref)
    )
    epsilon, beta = float(epsilon), float(beta)
    # Same 1-D shape, checked before any arithmetic: numpy would broadcast a length-1 or a
    # (G, 1) input against the others and return a wrong number instead of an error.
    shapes = [x.shape for x in (rhos, A, pi_old, pi_ref)]
    if any(len(shape) != 1 for shape in shapes) or len(set(shapes)) != 1 or not len(rhos):
        raise ValueError(f"rhos, A, pi_theta_old and pi_theta_ref must be 1-D of one length "
                         f"G >= 1, got the shapes {shapes}")  # fmt: skip

    unclipped = rhos * A
    clipped = np.clip(rhos, 1 - epsilon, 1 + epsilon) * A
    # The minimum, output by output, makes the objective pessimistic: clipping can only
    # remove incentive, never add it.
    surrogate = np.mean(np.minimum(unclipped, clipped))

    # rho = pi_theta / pi_old, so the current policy is rho * pi_old, renormalized.
    pi_theta = rhos * pi_old
    pi_theta = pi_theta / pi_theta.sum()
    pi_ref = pi_ref / pi_ref.sum()
    # The 1e-10 keeps a probability that underflowed to 0 from giving 0 * log(0) = nan.
    kl = np.sum(pi_theta * np.log(pi_theta / pi_ref + 1e-10))

    return float(surrogate - beta * kl)
