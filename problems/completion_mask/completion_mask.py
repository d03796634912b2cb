"""Problem: the completion mask. Read README.md, then replace the body below."""

import numpy as np  # noqa: F401 - you will need it


def completion_mask(ids, eos_ids, mask_truncated=False):
    """Return the 0/1 mask of the tokens that belong to each completion.

    Args:
        ids: generated token ids, an integer numpy array of shape (B, T).
        eos_ids: the end-of-sequence id, an int, or a non-empty sequence of ints when the
            model has several.
        mask_truncated: when True, rows that contain no EOS (truncated completions) get an
            all-zero mask instead of all ones.

    Returns:
        An int64 numpy array of shape (B, T): 1 for every token up to and including the first
        EOS of its row, 0 after it.

    Raises:
        ValueError: if ids is not 2-D, or eos_ids is not an int or a non-empty sequence of ints
            (a bool is not an id).
    """
    raise NotImplementedError("completion_mask is not implemented yet: write its body")
