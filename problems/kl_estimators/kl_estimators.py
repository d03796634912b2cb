"""Problem: per-token KL estimators. Read README.md, then replace the bodies below."""

import numpy as np  # noqa: F401 - you will need it


def kl_k1(logp, logp_ref):
    """Return k1 = -log r per token, where r = pi_ref / pi_theta.

    Args:
        logp: log pi_theta of each sampled token (a float array of any shape).
        logp_ref: log pi_ref of the same tokens (the same shape).

    Returns:
        An array of the inputs' shape and floating dtype.

    Raises:
        ValueError: if logp and logp_ref do not have the same shape.
    """
    raise NotImplementedError("kl_k1 is not implemented yet: write its body")


def kl_k2(logp, logp_ref):
    """Return k2 = (log r)^2 / 2 per token, where r = pi_ref / pi_theta.

    Args:
        logp: log pi_theta of each sampled token (a float array of any shape).
        logp_ref: log pi_ref of the same tokens (the same shape).

    Returns:
        An array of the inputs' shape and floating dtype.

    Raises:
        ValueError: if logp and logp_ref do not have the same shape.
    """
    raise NotImplementedError("kl_k2 is not implemented yet: write its body")


def kl_k3(logp, logp_ref):
    """Return k3 = (r - 1) - log r per token, where r = pi_ref / pi_theta.

    Args:
        logp: log pi_theta of each sampled token (a float array of any shape).
        logp_ref: log pi_ref of the same tokens (the same shape).

    Returns:
        An array of the inputs' shape and floating dtype.

    Raises:
        ValueError: if logp and logp_ref do not have the same shape.
    """
    raise NotImplementedError("kl_k3 is not implemented yet: write its body")
