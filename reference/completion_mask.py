"""Reference solution: which generated tokens belong to each completion.

A completion ends at its first EOS token, which is part of it (the model chose to stop, and
that choice must be trained too). Everything after it is padding or junk the sampler kept
generating for other rows of the batch. Array-API generic: numpy in, numpy out; torch in,
torch out on the same device.
"""

from collections.abc import Sequence
from numbers import Integral

from array_api_compat import array_namespace


def eos_id_list(eos_ids: int | Sequence[int]) -> list[int]:
    """The EOS ids as a list of Python ints, or ValueError that says what was expected.

    Python and numpy integers count as ints; bools do not: `True` is an Integral equal to 1,
    but a flag passed by mistake, not a token id.
    """
    expected = f"eos_ids must be an int or a non-empty sequence of ints, got {eos_ids!r}"
    try:
        eos = list([eos_ids] if isinstance(eos_ids, Integral) else eos_ids)
    except TypeError:  # not iterable, or iterable in name only (a 0-d numpy array)
        raise ValueError(expected) from None
    if not eos or not all(isinstance(e, Integral) and not isinstance(e, bool) for e in eos):
        raise ValueError(expected)
    return [int(e) for e in eos]


def completion_mask(ids, eos_ids: int | Sequence[int], mask_truncated: bool = False):
    """0/1 int64 mask of shape (B, T): 1 up to and including the first EOS of each row.

    A row without any EOS was truncated by the length limit: it keeps all ones, or all zeros
    when `mask_truncated` is set (its reward judged an unfinished answer).
    """
    xp = array_namespace(ids)
    is_eos = _is_eos(ids, eos_ids)
    # A token is kept when no EOS came strictly before it: count the EOS tokens up to and
    # including each position, minus the token's own EOS.
    eos_before = xp.cumulative_sum(is_eos, axis=1) - is_eos
    mask = eos_before == 0
    if mask_truncated:
        mask = mask & ~truncated_rows(ids, eos_ids)[:, None]
    return xp.astype(mask, xp.int64)


def truncated_rows(ids, eos_ids: int | Sequence[int]):
    """(B,) booleans: the rows with no EOS at all, cut off by the length limit."""
    xp = array_namespace(ids)
    return ~xp.any(_is_eos(ids, eos_ids) == 1, axis=1)


def _is_eos(ids, eos_ids: int | Sequence[int]):
    """(B, T) int64: 1 where the token is one of the EOS ids."""
    xp = array_namespace(ids)
    if ids.ndim != 2:
        raise ValueError(
            f"ids must be a 2-D (batch, time) array of token ids, got shape {tuple(ids.shape)}"
        )
    eos = eos_id_list(eos_ids)
    is_eos = ids == eos[0]
    for eos_id in eos[1:]:
        is_eos = is_eos | (ids == eos_id)
    return xp.astype(is_eos, xp.int64)
