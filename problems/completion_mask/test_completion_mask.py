"""Hidden tests for completion_mask. The implementation arrives through the `impl` fixture.

The table (cases.json, inputs in .meta/cases.py) covers the input forms: every integer dtype of
the ids, every form of `eos_ids`, and the inputs that must be refused. The tests below pin the
mask itself, each expected mask written out by hand or by a plain loop.
"""

import numpy as np

from problems.support import cases
from problems.support.asserts import assert_array

EOS = 2
CASES = cases.load(__file__)
ACCEPTED = [c for c in CASES if c.raises is None]
REFUSED = [c for c in CASES if c.raises is not None]


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


# ----- the mask -----


def test_keeps_tokens_up_to_and_including_the_first_eos(impl):
    ids = np.array([[5, 6, 2, 7, 8], [5, 2, 9, 9, 9]], dtype=np.int64)
    mask(impl.completion_mask(ids, EOS), [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]])


def test_the_eos_token_itself_is_kept(impl):
    ids = np.array([[4, 4, 4, 2], [2, 4, 4, 4]], dtype=np.int64)
    mask(impl.completion_mask(ids, EOS), [[1, 1, 1, 1], [1, 0, 0, 0]])


def test_eos_at_position_zero_keeps_only_that_token(impl):
    ids = np.array([[2, 5, 6, 7], [5, 6, 2, 7]], dtype=np.int64)
    mask(impl.completion_mask(ids, EOS), [[1, 0, 0, 0], [1, 1, 1, 0]])


def test_later_eos_tokens_do_not_reopen_the_mask(impl):
    ids = np.array([[3, 2, 4, 2, 5], [2, 2, 5, 5, 5], [3, 2, 4, 4, 2]], dtype=np.int64)
    mask(impl.completion_mask(ids, EOS), [[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])


def test_truncated_row_keeps_every_token_by_default(impl):
    ids = np.array([[5, 6, 7, 8], [5, 2, 7, 8]], dtype=np.int64)
    mask(impl.completion_mask(ids, EOS), [[1, 1, 1, 1], [1, 1, 0, 0]])


def test_mask_truncated_zeros_rows_without_eos(impl):
    ids = np.array([[5, 6, 7, 8], [5, 2, 7, 8], [2, 2, 2, 2], [5, 6, 7, 2]], dtype=np.int64)
    got = impl.completion_mask(ids, EOS, mask_truncated=True)
    mask(got, [[0, 0, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]])


def test_mask_truncated_is_off_by_default(impl):
    ids = np.array([[5, 6, 7]], dtype=np.int64)
    mask(impl.completion_mask(ids, EOS), [[1, 1, 1]])
    mask(impl.completion_mask(ids, EOS, False), [[1, 1, 1]])
    mask(impl.completion_mask(ids, EOS, True), [[0, 0, 0]])


def test_every_row_truncated_or_none(impl):
    ids = np.array([[5, 6, 7], [8, 9, 1]], dtype=np.int64)
    mask(impl.completion_mask(ids, EOS, mask_truncated=True), np.zeros((2, 3)))
    mask(impl.completion_mask(ids, EOS), np.ones((2, 3)))
    finished = np.array([[2, 6, 7], [8, 2, 2]], dtype=np.int64)
    mask(impl.completion_mask(finished, EOS, mask_truncated=True), [[1, 0, 0], [1, 1, 0]])


def test_padding_with_the_eos_id_still_keeps_the_eos(impl):
    # Many tokenizers pad with the EOS id: `ids != pad_id` would drop the real EOS too.
    ids = np.array([[4, 5, 2, 2, 2], [4, 5, 6, 7, 2]], dtype=np.int64)
    mask(impl.completion_mask(ids, EOS), [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])


def test_tokens_after_eos_are_dropped_whatever_they_are(impl):
    # After the EOS the sampler may keep generating ordinary tokens for other rows' sake.
    ids = np.array([[3, 2, 3, 4], [0, 0, 2, 1]], dtype=np.int64)
    mask(impl.completion_mask(ids, EOS), [[1, 1, 0, 0], [1, 1, 1, 0]])


def test_several_eos_ids_each_end_a_completion(impl):
    ids = np.array([[3, 7, 4, 2], [3, 4, 2, 7], [3, 4, 5, 6], [3, 4, 5, 7]], dtype=np.int64)
    expected = [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
    mask(impl.completion_mask(ids, [2, 7]), expected, what="mask with eos_ids [2, 7]")
    mask(impl.completion_mask(ids, [7, 2]), expected, what="mask with eos_ids [7, 2]")
    mask(impl.completion_mask(ids, (9, 2, 7)), expected, what="mask with eos_ids (9, 2, 7)")
    # An id given twice (a config's eos_token_id list and the tokenizer's, joined) is still one.
    mask(impl.completion_mask(ids, [2, 7, 2]), expected, what="mask with eos_ids [2, 7, 2]")


def test_every_eos_id_is_compared_with_every_token(impl):
    # As many tokens per row as EOS ids: comparing ids == eos_ids elementwise would broadcast
    # the ids of column j against EOS id j only.
    ids = np.array([[7, 2], [2, 7], [5, 5]], dtype=np.int64)
    mask(impl.completion_mask(ids, [2, 7]), [[1, 0], [1, 0], [1, 1]])
    ids = np.array([[5, 7, 2], [5, 5, 2]], dtype=np.int64)
    mask(impl.completion_mask(ids, [2, 7, 9]), [[1, 1, 0], [1, 1, 1]])


def test_several_eos_ids_with_mask_truncated(impl):
    ids = np.array([[3, 7, 4, 2], [3, 4, 5, 6], [9, 9, 9, 9]], dtype=np.int64)
    got = impl.completion_mask(ids, (2, 7, 9), mask_truncated=True)
    mask(got, [[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])


def test_one_token_completions(impl):
    ids = np.array([[2], [5]], dtype=np.int64)
    mask(impl.completion_mask(ids, EOS), [[1], [1]])
    mask(impl.completion_mask(ids, EOS, mask_truncated=True), [[1], [0]])


def test_real_vocabulary_ids(impl):
    # Token ids of a real tokenizer do not fit in 8 or 16 bits.
    eos = [151643, 151645]
    ids = np.array([[872, 151645, 151643], [151643, 0, 9], [70000, 151644, 3]], dtype=np.int32)
    mask(impl.completion_mask(ids, eos), [[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    mask(impl.completion_mask(ids, eos, mask_truncated=True), [[1, 1, 0], [1, 0, 0], [0, 0, 0]])


def test_an_eos_id_too_large_for_the_ids_ends_nothing(impl):
    # A vocabulary id of 50256 can never occur in int16 or uint8 ids: nothing ends there.
    for dtype in (np.int16, np.uint8, np.int8):
        ids = np.array([[1, 2, 3], [4, 5, 6]], dtype=dtype)
        mask(impl.completion_mask(ids, 50256), [[1, 1, 1], [1, 1, 1]], what=f"{dtype.__name__} ids")
        mask(impl.completion_mask(ids, [50256, 5]), [[1, 1, 1], [1, 1, 0]],
             what=f"{dtype.__name__} ids, EOS ids 50256 and 5")  # fmt: skip


def test_eos_ids_are_compared_by_value_never_wrapped_around(impl):
    # Cast to the ids' dtype, 50256 would wrap to a token that does occur: 80 in uint8 and
    # int8, -15280 in int16; 258 to 2 in uint8. 2**63 does not fit int64, -1 fits no uint.
    for dtype, wrapped in ((np.uint8, 80), (np.int8, 80), (np.int16, -15280)):
        ids = np.array([[1, wrapped, 3], [wrapped, 5, 6]], dtype=dtype)
        mask(impl.completion_mask(ids, 50256), [[1, 1, 1], [1, 1, 1]],
             what=f"{dtype.__name__} ids holding {wrapped}, EOS id 50256")  # fmt: skip
    ids = np.array([[5, 2, 7]], dtype=np.uint8)
    mask(impl.completion_mask(ids, 258), [[1, 1, 1]], what="uint8 ids, EOS id 258")
    mask(impl.completion_mask(ids, [-1, 2]), [[1, 1, 0]], what="uint8 ids, EOS ids -1 and 2")
    mask(impl.completion_mask(ids, -1), [[1, 1, 1]], what="uint8 ids, EOS id -1")
    big = np.array([[5, 2**63, 7]], dtype=np.uint64)
    mask(impl.completion_mask(big, 2**63), [[1, 1, 0]], what="uint64 ids, EOS id 2**63")
    # ... also given as a numpy integer (np.int64(e) wraps np.uint64(2**63) to -2**63).
    mask(impl.completion_mask(big, [np.uint64(2**63)]), [[1, 1, 0]],
         what="uint64 ids, EOS id np.uint64(2**63)")  # fmt: skip
    signed = np.array([[5, -(2**63), 7]])
    mask(impl.completion_mask(signed, np.uint64(2**63)), [[1, 1, 1]],
         what="int64 ids holding -2**63, EOS id np.uint64(2**63)")  # fmt: skip
    mask(impl.completion_mask(np.array([[5, 2, 7]]), [2**70, 7]), [[1, 1, 1]],
         what="int64 ids, EOS ids 2**70 and 7")  # fmt: skip
    # As one numpy array, [2**53, 2**64 - 1] becomes float64, where 2**53 + 1 equals 2**53.
    mask(impl.completion_mask(np.array([[2**53 + 1, 5]]), [2**53, 2**64 - 1]), [[1, 1]],
         what="int64 ids holding 2**53 + 1, EOS ids 2**53 and 2**64 - 1")  # fmt: skip


def test_long_completions_padded_with_eos(impl):
    # Thousands of tokens, hundreds of them EOS padding: no count may wrap around (int8, int16).
    for length in (300, 70_000):
        ids = np.full((2, length), 2, dtype=np.int64)
        ids[0, :100] = 7  # EOS at 100, then EOS padding to the end
        ids[1, :] = 9  # truncated: no EOS anywhere
        expected = np.zeros((2, length), dtype=np.int64)
        expected[0, :101] = 1
        expected[1, :] = 1
        mask(impl.completion_mask(ids, EOS), expected, what=f"mask of {length}-token rows")


def test_matches_a_plain_loop_on_random_batches(impl):
    rng = np.random.default_rng(0)
    for shape in [(16, 10), (1, 1), (1, 40), (40, 1), (7, 3), (24, 100)]:
        ids = rng.integers(0, 12, size=shape)
        for eos_ids in ([2], [2, 5], [11, 0, 7]):
            for mask_truncated in (False, True):
                got = impl.completion_mask(ids, eos_ids, mask_truncated=mask_truncated)
                expected = loop_mask(ids, eos_ids, mask_truncated)
                what = f"mask of ids {shape} for eos_ids={eos_ids}, mask_truncated={mask_truncated}"
                mask(got, expected, what=what)


# ----- input forms and errors (table: cases.json) -----


def check_accepted(impl, prefix):
    for case in (c for c in ACCEPTED if c.name.startswith(prefix)):
        mask(case.run(impl), case.expected, what=f"mask in case {case.name} ({case.about})")


def check_refused(impl, prefix):
    for case in (c for c in REFUSED if c.name.startswith(prefix)):
        try:
            result = case.run(impl)
        except case.exception:
            continue
        except Exception as exc:  # noqa: BLE001 - any other outcome fails, saying which case
            raise AssertionError(
                f"case {case.name}: expected {case.raises} ({case.about}), "
                f"got {type(exc).__name__}: {exc}"
            ) from exc
        raise AssertionError(
            f"case {case.name}: expected {case.raises} ({case.about}), got a result: {result!r}"
        )


def test_accepts_ids_of_every_integer_dtype(impl):
    check_accepted(impl, "ids_")


def test_accepts_an_int_or_a_sequence_of_ints_as_eos_ids(impl):
    check_accepted(impl, "eos_")


def test_eos_ids_that_are_not_ints_raise_value_error(impl):
    check_refused(impl, "refused_eos_")


def test_ids_that_are_not_2d_raise_value_error(impl):
    check_refused(impl, "refused_ids_")


def test_does_not_modify_its_inputs(impl):
    for eos_ids in ([2, 7], (7,), np.array([2, 7]), 2):
        for mask_truncated in (False, True):
            ids = np.array([[5, 2, 7], [1, 1, 1], [7, 7, 2]], dtype=np.int32)
            seen = impl.completion_mask.observe(ids, eos_ids, mask_truncated=mask_truncated)
            assert seen.error is None, f"completion_mask raised {seen.error!r}"
            ids_after, eos_after = seen.args
            assert type(ids_after) is np.ndarray and ids_after.dtype == np.int32
            assert np.array_equal(ids_after, ids), f"ids were modified in place: {ids_after}"
            assert type(eos_after) is type(eos_ids), "eos_ids was replaced"
            assert np.array_equal(eos_after, eos_ids), f"eos_ids was modified: {eos_after!r}"
