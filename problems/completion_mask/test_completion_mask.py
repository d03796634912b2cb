"""Hidden tests for completion_mask. The implementation arrives through the `impl` fixture."""

import numpy as np
import pytest

from problems.support.asserts import assert_array

EOS = 2


def mask(got, expected, what="mask"):
    """Compare as an integer array: int64 0/1 of the expected shape, exactly."""
    assert_array(got, np.array(expected, dtype=np.int64), rtol=0, atol=0, kind="i", what=what)
    assert got.dtype == np.int64, f"{what} should have dtype int64, got {got.dtype}"


def loop_mask(ids, eos_ids, mask_truncated):
    """An independent, slow version: walk each row until its first EOS."""
    out = np.zeros(ids.shape, dtype=np.int64)
    for b, row in enumerate(ids):
        for t, token in enumerate(row):
            out[b, t] = 1
            if token in eos_ids:
                break
        else:
            if mask_truncated:
                out[b] = 0
    return out


def test_keeps_tokens_up_to_and_including_the_first_eos(impl):
    ids = np.array([[5, 6, 2, 7, 8], [5, 2, 9, 9, 9]])
    mask(impl.completion_mask(ids, EOS), [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]])


def test_the_eos_token_itself_is_kept(impl):
    ids = np.array([[4, 4, 4, 2]])
    mask(impl.completion_mask(ids, EOS), [[1, 1, 1, 1]])


def test_eos_at_position_zero_keeps_only_that_token(impl):
    ids = np.array([[2, 5, 6, 7], [5, 6, 2, 7]])
    mask(impl.completion_mask(ids, EOS), [[1, 0, 0, 0], [1, 1, 1, 0]])


def test_later_eos_tokens_do_not_reopen_the_mask(impl):
    ids = np.array([[3, 2, 4, 2, 5]])
    mask(impl.completion_mask(ids, EOS), [[1, 1, 0, 0, 0]])


def test_truncated_row_keeps_every_token_by_default(impl):
    ids = np.array([[5, 6, 7, 8], [5, 2, 7, 8]])
    mask(impl.completion_mask(ids, EOS), [[1, 1, 1, 1], [1, 1, 0, 0]])


def test_mask_truncated_zeros_rows_without_eos(impl):
    ids = np.array([[5, 6, 7, 8], [5, 2, 7, 8], [2, 2, 2, 2]])
    got = impl.completion_mask(ids, EOS, mask_truncated=True)
    mask(got, [[0, 0, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]])


def test_mask_truncated_is_off_by_default(impl):
    ids = np.array([[5, 6, 7]])
    mask(impl.completion_mask(ids, EOS), [[1, 1, 1]])
    mask(impl.completion_mask(ids, EOS, False), [[1, 1, 1]])
    mask(impl.completion_mask(ids, EOS, True), [[0, 0, 0]])


def test_padding_with_the_eos_id_still_keeps_the_eos(impl):
    # Many tokenizers pad with the EOS id: `ids != pad_id` would drop the real EOS too.
    ids = np.array([[4, 5, 2, 2, 2], [4, 5, 6, 7, 2]])
    mask(impl.completion_mask(ids, EOS), [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])


def test_tokens_after_eos_are_dropped_whatever_they_are(impl):
    # After the EOS the sampler may keep generating ordinary tokens for other rows' sake.
    ids = np.array([[3, 2, 3, 4], [0, 0, 2, 1]])
    mask(impl.completion_mask(ids, EOS), [[1, 1, 0, 0], [1, 1, 1, 0]])


def test_several_eos_ids_each_end_a_completion(impl):
    ids = np.array([[3, 7, 4, 2], [3, 4, 2, 7], [3, 4, 5, 6]])
    expected = [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    mask(impl.completion_mask(ids, [2, 7]), expected, what="mask with eos_ids [2, 7]")
    mask(impl.completion_mask(ids, [7, 2]), expected, what="mask with eos_ids [7, 2]")


def test_several_eos_ids_with_mask_truncated(impl):
    ids = np.array([[3, 7, 4, 2], [3, 4, 5, 6], [9, 9, 9, 9]])
    got = impl.completion_mask(ids, (2, 7, 9), mask_truncated=True)
    mask(got, [[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize(
    "eos_ids",
    [2, [2], (2,), np.int64(2), np.array([2])],
    ids=["int", "list", "tuple", "np.int64", "array"],
)
def test_accepts_an_int_or_a_sequence_of_ints(impl, eos_ids):
    ids = np.array([[1, 2, 3]])
    mask(impl.completion_mask(ids, eos_ids), [[1, 1, 0]])


def test_accepts_int32_ids(impl):
    ids = np.array([[1, 2, 3], [1, 1, 1]], dtype=np.int32)
    mask(impl.completion_mask(ids, EOS), [[1, 1, 0], [1, 1, 1]])


def test_matches_a_plain_loop_on_a_random_batch(impl):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 12, size=(16, 10))
    for eos_ids in ([2], [2, 5]):
        for mask_truncated in (False, True):
            got = impl.completion_mask(ids, eos_ids, mask_truncated=mask_truncated)
            expected = loop_mask(ids, eos_ids, mask_truncated)
            mask(got, expected, what=f"mask for eos_ids={eos_ids}, mask_truncated={mask_truncated}")


def test_a_single_row_batch(impl):
    mask(impl.completion_mask(np.array([[9, 2]]), 9), [[1, 0]])


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)], ids=str)
def test_ids_that_are_not_2d_raise_value_error(impl, shape):
    with pytest.raises(ValueError):
        impl.completion_mask(np.ones(shape, dtype=np.int64), EOS)


@pytest.mark.parametrize("eos_ids", [[], ()], ids=["list", "tuple"])
def test_empty_eos_ids_raise_value_error(impl, eos_ids):
    with pytest.raises(ValueError):
        impl.completion_mask(np.array([[1, 2, 3]]), eos_ids)


def test_does_not_modify_its_inputs(impl):
    ids = np.array([[5, 2, 7], [1, 1, 1]])
    eos_ids = [2, 7]
    impl.completion_mask(ids, eos_ids, mask_truncated=True)
    assert np.array_equal(ids, [[5, 2, 7], [1, 1, 1]]), "ids were modified in place"
    assert eos_ids == [2, 7], "eos_ids was modified in place"
