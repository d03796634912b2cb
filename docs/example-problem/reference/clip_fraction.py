"""Reference solution of clip_fraction: never handed to learners."""

import numpy as np


def clip_fraction(ratios, mask, epsilon=0.2):
    ratios = np.asarray(ratios)
    mask = np.asarray(mask, dtype=bool)
    if ratios.shape != mask.shape:
        raise ValueError(f"ratios {ratios.shape} and mask {mask.shape} must have the same shape")
    counted = mask.sum()
    if counted == 0:
        return 0.0
    clipped = (ratios < 1 - epsilon) | (ratios > 1 + epsilon)
    return float((clipped & mask).sum() / counted)
