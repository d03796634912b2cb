"""The statements' figures, drawn at build time from the reference solutions.

A statement shows a figure with ``![what it shows](figures/<name>.svg)``; `FIGURES` says which
function draws it. Each plot calls the reference code itself, so a figure cannot drift from
the formula the tests check. The SVGs are deterministic (no date, a fixed id salt) and keep
their text as text: small, sharp, and the same bytes for the same code.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

# Colours that keep 4.5:1 contrast on white, told apart by line style and marker too.
BLUE, RED, GREEN = "#2454c5", "#b3261e", "#17753a"
FIGURE_LINK = re.compile(r"\]\(figures/([\w-]+)\.svg[ )]")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "svg.fonttype": "none",  # text stays text
        "svg.hashsalt": "grpo-kit",  # the same ids in every build
        "font.size": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
    })  # fmt: skip
    return plt


def clipped_surrogate(plt):
    """min(rho A, clip(rho) A) against rho, for A > 0 and A < 0 (one output, no KL)."""
    from reference.grpo_objective import grpo_objective

    epsilon = 0.2
    rhos = np.linspace(0.01, 2.0, 400)
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 2.9), sharey=False, layout="constrained")
    for ax, advantage, title in ((axes[0], 1.0, "A = +1"), (axes[1], -1.0, "A = −1")):
        # One output whose policies agree (both normalize to 1): the KL term is 0 with beta=0.
        objective = [grpo_objective([r], [advantage], [1.0], [1.0], epsilon, 0.0) for r in rhos]
        ax.plot(rhos, rhos * advantage, color=RED, linestyle=":", label="unclipped ρA")
        ax.plot(rhos, objective, color=BLUE, linewidth=2.2, label="min(ρA, clip(ρ)A)")
        for bound, label, align in (
            (1 - epsilon, "1 − ε ", "right"),
            (1 + epsilon, " 1 + ε", "left"),
        ):
            ax.axvline(bound, color="#5b6675", linewidth=0.8, linestyle="--")
            ax.text(bound, 0.02, label, ha=align, transform=ax.get_xaxis_transform())
        ax.set_title(title)
        ax.set_xlabel("probability ratio ρ")
        ax.grid(alpha=0.25)
    axes[0].set_ylabel("surrogate term")
    axes[0].legend(loc="upper left", frameon=False)
    return fig


def kl_estimators(plt):
    """k1, k2 and k3 against the log-ratio log r = log pi_ref - log pi_theta."""
    from reference.kl_estimators import kl_k1, kl_k2, kl_k3

    log_r = np.linspace(-2.0, 2.0, 401)
    logp = np.zeros_like(log_r)
    fig, ax = plt.subplots(figsize=(5.6, 3.2), layout="constrained")
    ax.axhline(0, color="#5b6675", linewidth=0.8)
    ax.plot(log_r, kl_k1(logp, log_r), color=RED, linestyle=":", label="k1 = −log r")
    ax.plot(log_r, kl_k2(logp, log_r), color=GREEN, linestyle="--", label="k2 = (log r)² / 2")
    ax.plot(log_r, kl_k3(logp, log_r), color=BLUE, linewidth=2.2, label="k3 = (r − 1) − log r")
    ax.set_xlabel("log r = log π_ref(o) − log π_θ(o)")
    ax.set_ylabel("per-token estimate")
    ax.set_ylim(-2.2, 4.5)
    ax.legend(loc="upper center", frameon=False)
    ax.grid(alpha=0.25)
    return fig


def length_bias(plt):
    """How much one token, and one whole completion, weighs in each aggregation, by length."""
    from reference.masked_token_loss import AGGREGATIONS, aggregate_loss

    lengths = np.arange(8, 65, 8)  # a batch of 8 completions, T = 64
    batch, width = len(lengths), 64
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float64)
    styles = {
        "sequence": (RED, "o", "-"),
        "token": (BLUE, "s", "--"),
        "constant": (GREEN, "^", ":"),
    }
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 2.9), layout="constrained")
    for aggregation in AGGREGATIONS:
        # The loss is linear in the token losses: a one-hot input reads off one weight.
        token_weight, completion_weight = [], []
        for i in range(batch):
            one_token = np.zeros((batch, width))
            one_token[i, 0] = 1.0
            token_weight.append(float(aggregate_loss(one_token, mask, aggregation)))
            whole = np.zeros((batch, width))
            whole[i] = mask[i]
            completion_weight.append(float(aggregate_loss(whole, mask, aggregation)))
        color, marker, line = styles[aggregation]
        for ax, weights in ((axes[0], token_weight), (axes[1], completion_weight)):
            ax.plot(lengths, weights, color=color, marker=marker, linestyle=line,
                    label=f'"{aggregation}"')  # fmt: skip
    axes[0].set_title("weight of one token")
    axes[1].set_title("weight of a whole completion")
    for ax in axes:
        ax.set_xlabel("completion length (tokens)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.25)
    axes[0].legend(frameon=False)
    return fig


# (problem slug, figure name) -> the function that draws it.
FIGURES: dict[tuple[str, str], Callable] = {
    ("grpo_objective", "clipped_surrogate"): clipped_surrogate,
    ("kl_estimators", "kl_estimators"): kl_estimators,
    ("masked_token_loss", "length_bias"): length_bias,
}


def linked_figures(statement: str) -> list[str]:
    """The figure names a statement shows."""
    return FIGURE_LINK.findall(statement)


def render(slug: str, name: str) -> bytes:
    """The SVG of one figure; KeyError if no function draws it."""
    draw = FIGURES[(slug, name)]
    plt = _pyplot()
    fig = draw(plt)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", transparent=True, metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def write_figures(slug: str, statement: str, folder: Path) -> list[str]:
    """Draw the figures `statement` shows into `folder`; returns their names."""
    names = linked_figures(statement)
    for name in names:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.svg").write_bytes(render(slug, name))
    return names
