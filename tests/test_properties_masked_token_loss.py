"""Properties of the reference masked_token_loss, on random small batches (hypothesis)."""

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reference.masked_token_loss import aggregate_loss, masked_token_loss, per_token_loss

AGGREGATION = st.sampled_from(["sequence", "token", "constant"])
LOGP = st.floats(-6.0, -0.01, allow_nan=False, width=64)
ADVANTAGE = st.floats(-3.0, 3.0, allow_nan=False, width=64)


@st.composite
def batches(draw, full: bool = False) -> dict:
    """Random (B, T) batches; completions are a prefix of their row, possibly empty."""
    batch, length = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    shape = (batch, length)
    lengths = (
        [length] * batch
        if full
        else draw(st.lists(st.integers(0, length), min_size=batch, max_size=batch))
    )
    mask = (np.arange(length)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    return dict(
        logp=draw(arrays(np.float64, shape, elements=LOGP)),
        logp_old=draw(arrays(np.float64, shape, elements=LOGP)),
        logp_ref=draw(arrays(np.float64, shape, elements=LOGP)),
        advantages=draw(arrays(np.float64, (batch,), elements=ADVANTAGE)),
        mask=mask,
    )


def hand_computed(case, epsilon, beta, epsilon_high, aggregation) -> float:
    """The statement's formula, one Python float at a time."""
    high = epsilon if epsilon_high is None else epsilon_high
    rows = []
    for i, a in enumerate(case["advantages"]):
        losses = []
        for t in np.flatnonzero(case["mask"][i]):
            lp, lo, lr = (float(case[k][i, t]) for k in ("logp", "logp_old", "logp_ref"))
            rho = math.exp(lp - lo)
            surrogate = min(rho * a, min(max(rho, 1 - epsilon), 1 + high) * a)
            kl = math.exp(lr - lp) - (lr - lp) - 1
            losses.append(-(surrogate - beta * kl))
        rows.append(losses)
    total = sum(sum(r) for r in rows)
    if aggregation == "sequence":
        return sum(sum(r) / max(len(r), 1) for r in rows) / len(rows)
    if aggregation == "token":
        return total / max(sum(len(r) for r in rows), 1)
    return total / (len(rows) * case["mask"].shape[1])


@settings(max_examples=200, deadline=None)
@given(
    batches(),
    AGGREGATION,
    st.floats(0.05, 0.5),
    st.floats(0.0, 0.5),
    st.one_of(st.none(), st.floats(0.2, 0.6)),
)
def test_loss_equals_the_hand_computed_value(case, aggregation, epsilon, beta, epsilon_high):
    got = masked_token_loss(
        **case, epsilon=epsilon, beta=beta, aggregation=aggregation, epsilon_high=epsilon_high
    )
    expected = hand_computed(case, epsilon, beta, epsilon_high, aggregation)
    assert isinstance(got, float)
    assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=200, deadline=None)
@given(batches(full=True))
def test_aggregations_agree_when_completions_have_equal_length(case):
    length = case["mask"].shape[1]
    token = masked_token_loss(**case, aggregation="token")
    sequence = masked_token_loss(**case, aggregation="sequence")
    constant = masked_token_loss(**case, aggregation="constant", max_len=length)
    assert math.isclose(sequence, token, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(constant, token, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=100, deadline=None)
@given(batches(), AGGREGATION, st.sampled_from([math.nan, math.inf, -math.inf]))
def test_padding_never_reaches_the_loss(case, aggregation, garbage):
    clean = masked_token_loss(**case, aggregation=aggregation)
    padding = case["mask"] == 0
    dirty = {**case}
    for name in ("logp", "logp_old", "logp_ref"):
        dirty[name] = np.where(padding, garbage, case[name])
    assert masked_token_loss(**dirty, aggregation=aggregation) == clean


@settings(max_examples=100, deadline=None)
@given(batches(), AGGREGATION, st.integers(1, 3))
def test_micro_batches_with_the_batch_normalizer_sum_to_the_batch_loss(case, aggregation, parts):
    batch, length = case["mask"].shape
    normalizer = {
        "sequence": batch,
        "token": max(int(case["mask"].sum()), 1),
        "constant": batch * length,
    }[aggregation]
    whole = masked_token_loss(**case, aggregation=aggregation)
    pieces = 0.0
    for rows in np.array_split(np.arange(batch), parts):
        if len(rows) == 0:
            continue
        part = {k: v[rows] for k, v in case.items()}
        per_token = per_token_loss(**part)
        pieces += float(aggregate_loss(per_token, part["mask"], aggregation, normalizer=normalizer))
    assert math.isclose(pieces, whole, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=50, deadline=None)
@given(batches(), AGGREGATION)
def test_torch_tensors_give_the_numpy_value(case, aggregation):
    tensors = {k: torch.from_numpy(v) for k, v in case.items()}
    got = masked_token_loss(**tensors, aggregation=aggregation)
    assert isinstance(got, torch.Tensor) and got.ndim == 0
    expected = masked_token_loss(**case, aggregation=aggregation)
    assert math.isclose(got.item(), expected, rel_tol=1e-12, abs_tol=1e-12)
