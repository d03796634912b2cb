"""Properties of reference.completion_mask on random batches, numpy and torch."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reference.completion_mask import completion_mask

EOS_IDS = st.lists(st.integers(0, 5), min_size=1, max_size=3)
IDS = arrays(
    np.int64,
    st.tuples(st.integers(1, 6), st.integers(1, 12)),
    elements=st.integers(0, 5),
)


@settings(max_examples=100, deadline=None)
@given(IDS, EOS_IDS)
def test_mask_is_a_prefix_ending_at_the_first_eos(ids, eos_ids):
    mask = completion_mask(ids, eos_ids)
    assert mask.dtype == np.int64 and mask.shape == ids.shape
    is_eos = np.isin(ids, eos_ids)
    for row, row_mask, row_eos in zip(ids, mask, is_eos, strict=True):
        length = int(np.argmax(row_eos)) + 1 if row_eos.any() else len(row)
        assert row_mask.tolist() == [1] * length + [0] * (len(row) - length), row


@settings(max_examples=100, deadline=None)
@given(IDS, EOS_IDS)
def test_mask_truncated_only_zeros_rows_without_eos(ids, eos_ids):
    kept = completion_mask(ids, eos_ids)
    dropped = completion_mask(ids, eos_ids, mask_truncated=True)
    finished = np.isin(ids, eos_ids).any(axis=1)
    assert np.array_equal(dropped[finished], kept[finished])
    assert not dropped[~finished].any()


@settings(max_examples=50, deadline=None)
@given(IDS, EOS_IDS, st.booleans())
def test_torch_ids_give_the_same_int64_mask(ids, eos_ids, mask_truncated):
    expected = completion_mask(ids, eos_ids, mask_truncated)
    got = completion_mask(torch.from_numpy(ids), eos_ids, mask_truncated)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int64
    assert got.device == torch.device("cpu")
    assert np.array_equal(got.numpy(), expected)
