"""Problem: How often the ratio is clipped. Read README.md, then replace the body below."""

import numpy as np  # noqa: F401 - you will need it


def clip_fraction(ratios, mask, epsilon=0.2):
    """Return the share of completion tokens whose probability ratio lies outside the clip range.

    Args:
        ratios: (N, T) per-token ratios pi_theta / pi_theta_old.
        mask: (N, T) completion mask, 1 (or True) for the tokens that count.
        epsilon: the clip range is [1 - epsilon, 1 + epsilon]; its ends are not clipped.

    Returns:
        A Python float in [0, 1]; 0.0 when no token counts.

    Raises:
        ValueError: when ratios and mask differ in shape.
    """
    raise NotImplementedError("clip_fraction is not implemented yet: write its body")
