"""Reference solution: per-token estimators of KL(pi_theta || pi_ref).

Each token o_t was sampled from pi_theta. With the per-token ratio r = pi_ref(o_t) / pi_theta(o_t),
three functions of r have an expectation under pi_theta equal (k1, k3) or close (k2) to the KL:

    k1 = -log r                unbiased, high variance, negative on many tokens
    k2 = (log r)^2 / 2         biased, low variance, always >= 0
    k3 = (r - 1) - log r       unbiased, low variance, always >= 0 (GRPO's choice)

The functions are array-API generic: numpy arrays in, numpy arrays out; torch tensors in,
torch tensors out, differentiable.
"""

from array_api_compat import array_namespace


def _log_ratio(logp, logp_ref):
    """log r = log pi_ref - log pi_theta, per token, after checking the shapes agree."""
    array_namespace(logp, logp_ref)  # rejects lists and mixed libraries with a clear TypeError
    if tuple(logp.shape) != tuple(logp_ref.shape):
        # Broadcasting would silently pair the wrong tokens, so mismatched shapes are an error.
        raise ValueError(
            f"logp and logp_ref must have the same shape (one log-prob per token), got "
            f"{tuple(logp.shape)} and {tuple(logp_ref.shape)}"
        )
    return logp_ref - logp


def kl_k1(logp, logp_ref):
    """k1 = -log r = log pi_theta - log pi_ref per token: unbiased but noisy, often negative."""
    return -_log_ratio(logp, logp_ref)


def kl_k2(logp, logp_ref):
    """k2 = (log r)^2 / 2 per token: never negative, low variance, biased when the policies differ."""
    log_r = _log_ratio(logp, logp_ref)
    return 0.5 * log_r**2


def kl_k3(logp, logp_ref):
    """k3 = (r - 1) - log r per token: unbiased, low variance and never negative."""
    xp = array_namespace(logp, logp_ref)
    log_r = _log_ratio(logp, logp_ref)
    # r - 1 has expectation 0 under pi_theta (a control variate), and log x <= x - 1 keeps k3 >= 0.
    # expm1 computes r - 1 without first rounding r to 1, so k3 stays >= 0 in floating point too.
    return xp.expm1(log_r) - log_r
