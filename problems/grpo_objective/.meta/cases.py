"""Inputs of problems/grpo_objective/cases.json; the expected values come from the reference."""

import math

import numpy as np

from problems.support.asserts import broadcast_variants

NAMES = ["rhos", "A", "pi_theta_old", "pi_theta_ref"]
EXAMPLE = [[1.2, 0.8, 1.1], [1.0, 1.0, 1.0], [0.9, 1.1, 1.0], [1.0, 0.5, 1.5]]
# Five outputs that hit every branch of the minimum: clipped low and high, unclipped on both
# sides, and an advantage of 0.
MIXED = [
    [0.3, 1.0, 1.25, 5.0, 20.0],
    [-1.2, 0.0, 0.7, -0.4, 1.5],
    [0.1, 0.3, 0.2, 0.25, 0.15],
    [0.2, 0.2, 0.3, 0.1, 0.2],
]


def case(name, args, about, **kwargs):
    return {"name": name, "function": "grpo_objective", "args": args, "kwargs": kwargs,
            "about": about}  # fmt: skip


def cases():
    f32 = [np.asarray(x, dtype=np.float32) for x in MIXED]
    return [
        case("mixed", MIXED, "every branch of the minimum at once", epsilon=0.2, beta=0.04),
        case("mixed-eps-0.01", MIXED, "a clip range that is almost empty", epsilon=0.01, beta=0.04),
        case("mixed-eps-0.99", MIXED, "a clip range of almost [0, 2]", epsilon=0.99, beta=0.04),
        case("mixed-beta-0", MIXED, "no KL penalty", beta=0.0),
        case("mixed-beta-3", MIXED, "a KL penalty larger than the surrogate", beta=3.0),
        case("single-output", [[1.7], [-0.5], [0.2], [0.9]], "G = 1: the KL is 0", beta=1.0),
        case(
            "huge-ratios",
            [[math.exp(25), 1e-6, 20.0], [-0.5, 2.0, -3.0], [1e-12, 0.5, 0.5], [0.3, 0.3, 0.4]],
            "ratios of e^25 and 1e-6: the unclipped term counts in full where it is lower",
        ),
        case(
            "integers",
            [[2, 1, 1], [1, -2, 0], [1, 3, 2], [2, 2, 1]],
            "integer sequences and an integer beta",
            beta=1,
        ),
        case("float32-arrays", f32, "float32 arrays, computed in float64", beta=0.5),
        case(
            "numpy-scalars",
            [[np.float32(x) for x in MIXED[0]], list(np.asarray(MIXED[1])), MIXED[2], MIXED[3]],
            "lists of numpy scalars, numpy scalar epsilon and beta",
            epsilon=np.float64(0.3),
            beta=np.float32(0.25),
        ),
        case("tuples", [tuple(x) for x in EXAMPLE], "tuples are sequences too"),
        # Inputs that must be rejected: different lengths, or shapes that broadcast.
        *[
            case(f"lengths-{'-'.join(map(str, n))}", [[1.0] * k for k in n], "different lengths")
            for n in [
                (3, 2, 3, 3),
                (3, 3, 2, 3),
                (3, 3, 3, 4),
                (2, 3, 3, 3),
                (1, 3, 3, 3),
                (3, 1, 3, 3),
                (3, 3, 1, 3),
                (3, 3, 3, 1),
            ]  # fmt: skip
        ],
        case("empty", [[], [], [], []], "G = 0: a mean over no outputs"),
        case(
            "column-advantages",
            [EXAMPLE[0], [[1.0], [-0.5], [2.0]], EXAMPLE[2], EXAMPLE[3]],
            "A of shape (3, 1) would broadcast to a (3, 3) matrix",
        ),
        case("all-2d", [[x] for x in EXAMPLE], "every input of shape (1, 3)"),
        case("scalar-ratio", [1.2, [1.0], [0.5], [0.5]], "a 0-d ratio"),
        # Each input in turn of a shape numpy broadcasts against the others' (5,): (1,), 0-d,
        # a row (1, 5) or a column (5, 1).
        *[
            case(
                f"broadcast-{name}-{'x'.join(map(str, bad.shape)) or '0d'}",
                [*MIXED[:i], bad, *MIXED[i + 1 :]],
                f"{name} of shape {bad.shape}, the others of shape (5,)",
            )
            for i, name in enumerate(NAMES)
            for bad in broadcast_variants(MIXED[i])
        ],
    ]
