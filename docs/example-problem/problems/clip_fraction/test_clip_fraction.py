"""Hidden tests of clip_fraction. The solution arrives through the `impl` fixture."""

import numpy as np
import pytest

from problems.support.asserts import assert_scalar

RATIOS = [[1.0, 1.3, 0.7, 9.0]]
MASK = [[1, 1, 1, 0]]


def test_example_from_the_statement(impl):
    assert_scalar(impl.clip_fraction(RATIOS, MASK), 2 / 3)


def test_the_result_is_a_python_float(impl):
    got = impl.clip_fraction(RATIOS, MASK)
    assert type(got) is float, f"expected a float, got {type(got).__name__}"


def test_padding_never_counts(impl):
    assert_scalar(impl.clip_fraction([[1.0, 0.01, 100.0]], [[1, 0, 0]], 0.2), 0.0)


def test_the_ends_of_the_range_are_not_clipped(impl):
    assert_scalar(impl.clip_fraction([[0.75, 1.25, 0.74, 1.26]], [[1, 1, 1, 1]], 0.25), 0.5)


def test_epsilon_sets_the_range(impl):
    assert_scalar(impl.clip_fraction([[0.6, 1.3, 1.45, 1.0]], [[1, 1, 1, 1]], 0.5), 0.0)
    assert_scalar(impl.clip_fraction([[0.6, 1.3, 1.45, 1.0]], [[1, 1, 1, 1]], 0.1), 0.75)


def test_both_ends_count(impl):
    assert_scalar(impl.clip_fraction([[0.5, 1.0]], [[1, 1]]), 0.5)
    assert_scalar(impl.clip_fraction([[1.5, 1.0]], [[1, 1]]), 0.5)


def test_no_token_gives_zero(impl):
    assert_scalar(impl.clip_fraction([[1.5, 0.5]], [[0, 0]]), 0.0)


def test_one_token_that_is_clipped(impl):
    assert_scalar(impl.clip_fraction([[1.5, 0.5]], [[1, 0]]), 1.0)


def test_a_float_mask_over_a_batch(impl):
    ratios = np.array([[1.0, 1.5, 1.1], [0.5, 0.9, 3.0]])
    mask = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    assert_scalar(impl.clip_fraction(ratios, mask, 0.2), 3 / 5)


def test_rejects_ratios_and_mask_of_different_shapes(impl):
    with pytest.raises(ValueError, match="shape"):
        impl.clip_fraction(np.ones((2, 3)), np.ones(3))


def test_does_not_modify_its_inputs(impl):
    ratios, mask = np.array([[1.0, 1.5, 0.2]]), np.array([[1.0, 1.0, 0.0]])
    call = impl.clip_fraction.observe(ratios, mask)
    if call.error is not None:
        raise call.error
    assert np.array_equal(call.args[0], ratios) and np.array_equal(call.args[1], mask)
