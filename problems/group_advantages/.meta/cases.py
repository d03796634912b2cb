"""Inputs of problems/group_advantages/cases.json; the expected values come from the reference."""

import math

import numpy as np

EXAMPLE = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
ROWS = [[0.2, 0.9, 0.4, 0.5], [1.0, 1.0, 1.0, 1.0]]


def case(name, rewards, group_size, about, **kwargs):
    return {"name": name, "function": "group_advantages", "args": [rewards, group_size],
            "kwargs": kwargs, "about": about}  # fmt: skip


def cases():
    rng = np.random.default_rng(3)
    random = rng.normal(size=(6, 5)) * rng.uniform(0.01, 100, size=(6, 1))
    return [
        # Worked examples of the statement.
        case("example", EXAMPLE, 3, "a group with spread and a constant group"),
        case("example-dr-grpo", EXAMPLE, 3, "without std scaling", scale_by_std=False),
        case("example-2d", np.array(ROWS), 4, "one group per row"),
        case("constant-0.1-eps-0", [0.1, 0.1, 0.1], 3, "equal rewards, eps = 0", eps=0.0),
        # Types and dtypes of the rewards.
        case("int-list", [3, 0, 1, 1, 1, 1], 3, "a list of ints gives float64"),
        case("int32-array", np.array([3, 0, 1, 2], dtype=np.int32), 2, "int32 gives float64"),
        case("bool-array", np.array([True, False, False, True, True, True]), 3, "bools too"),
        case("float32-array", np.float32([0.25, 0.5, 1.0, 0.0]), 4, "float32 stays float32"),
        case("float32-2d", np.float32(ROWS), 4, "float32 rows stay float32"),
        case(
            "float32-dr-grpo",
            np.float32([1, 2, 2, 2]),
            2,
            "float32 without std scaling",
            scale_by_std=False,
        ),  # fmt: skip
        case("list-of-rows", ROWS, 4, "a list of lists is 2-D"),
        case("numpy-int-group-size", EXAMPLE, np.int64(3), "group_size as a numpy integer"),
        case("numpy-float-eps", [0.0, 1.0, 2.0], 3, "eps as a numpy float", eps=np.float32(0.5)),
        # eps and the spread.
        case("eps-1", [0.0, 1.0, 2.0], 3, "sample std 1, eps 1: halves the advantages", eps=1.0),
        case("eps-0", [0.0, 1.0, 4.0, 0.5], 2, "eps = 0: the plain formula", eps=0.0),
        case("tiny-spread", [0.0, 1e-9, 5.0, 5.0 + 1e-12], 2, "different rewards, however close"),
        case(
            "tiny-spread-eps-0", [0.0, 1e-9, 5.0, 5.0 + 1e-12], 2, "the same with eps = 0", eps=0.0
        ),  # fmt: skip
        case("few-ulps-apart", [1.0, 1.0 + 2**-50, 3.0, 3.0], 2, "a few ulps of spread", eps=0.0),
        case("large-offset", [1e8, 1e8 + 1, 1e8 + 3], 3, "rewards far from 0"),
        case("extreme-rewards", [-1e150, 1e150, 0.0, 1e-150], 2, "very large and very small"),
        case("random-groups", random.ravel(), 5, "groups on very different scales"),
        case("random-dr-grpo", random, 5, "the same rows, unscaled", scale_by_std=False),
        case("one-group", [0.5, 0.25, 1.0, 0.0, 0.75], 5, "the whole batch is one group"),
        case("groups-of-one", [3.0, -1.0, 0.5], 1, "a group of one has no spread"),
        case("empty-1d", np.zeros(0), 4, "no rewards"),
        case("empty-2d", np.zeros((0, 3)), 3, "no prompts"),
        # What must raise ValueError.
        case("group-size-0", [1.0, 2.0], 0, "group_size < 1"),
        case("group-size-negative", [1.0, 2.0], -2, "group_size < 1"),
        case("group-size-0-empty", [], 0, "group_size < 1, no rewards"),
        case("group-size-float", [1.0, 2.0, 3.0, 4.0], 2.0, "group_size is not an integer"),
        case("group-size-bool", [1.0, 2.0], True, "a bool is no group size"),
        case("length-5-by-2", np.arange(5.0), 2, "length not a multiple of group_size"),
        case("length-3-by-4", np.arange(3.0), 4, "fewer rewards than one group"),
        case("columns-3-by-2", np.ones((4, 3)), 2, "2-D with the wrong number of columns"),
        case("columns-3-by-12", np.ones((4, 3)), 12, "2-D read as if 1-D"),
        case("columns-6-by-3", np.arange(12.0).reshape(2, 6), 3, "2-D rows of two groups each"),
        case("columns-2-by-3", np.arange(6.0).reshape(3, 2), 3, "2-D with group_size as its rows"),
        case("columns-5-by-3-empty", np.zeros((0, 5)), 3, "no prompts, wrong columns all the same"),
        case("column-of-6-by-3", np.array(EXAMPLE)[:, None], 3, "2-D (6, 1): a column, not 1-D"),
        case("row-of-6-by-3", np.array([EXAMPLE]), 3, "2-D (1, 6): one row of two groups"),
        case("three-dimensional", np.ones((2, 2, 2)), 2, "more than 2 dimensions"),
        case("zero-dimensional", np.float64(1.0), 1, "a single number is not a batch"),
        case("python-number", 5.0, 1, "a Python number is not a batch either"),
        case("nan", [0.0, 1.0, math.nan, 1.0], 2, "a NaN reward"),
        case("inf", [0.0, 1.0, math.inf, 1.0], 2, "an infinite reward"),
        case(
            "minus-inf-dr-grpo",
            [0.0, 1.0, -math.inf, 1.0],
            2,
            "checked without scaling too",
            scale_by_std=False,
        ),  # fmt: skip
        case("nan-2d", np.array([[0.0, math.nan], [1.0, 1.0]]), 2, "a NaN in 2-D rewards"),
        case("nan-float32", np.float32([0.0, math.nan]), 2, "a float32 NaN"),
        # A shortcut for constant groups must not skip the check.
        case("nan-group-of-one", [1.0, math.nan], 1, "a NaN alone in its group"),
        case("inf-equal-group", [math.inf, math.inf, 0.0, 1.0], 2, "equal infinities"),
        case("inf-equal-batch", [math.inf, math.inf], 2, "a batch of equal infinities"),
        case(
            "minus-inf-equal-dr-grpo",
            np.array([[-math.inf, -math.inf], [0.0, 1.0]]),
            2,
            "equal infinities, unscaled",
            scale_by_std=False,
        ),  # fmt: skip
    ]
