"""PNG plots of a training run's metrics.jsonl, and of a group-size ablation."""

from __future__ import annotations

import json
from pathlib import Path

PANELS = (
    ("reward", "mean reward"),
    ("kl", "KL to the reference"),
    ("advantage_abs", "mean |advantage|"),
)


def read_metrics(path: Path) -> list[dict]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def plot_run(metrics_path: Path, out_png: Path) -> Path:
    """Reward, KL and advantage magnitude over steps, side by side."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    steps = [row["step"] for row in rows]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.2))
    for ax, (key, title) in zip(axes, PANELS, strict=True):
        ax.plot(steps, [row[key] for row in rows])
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=80)
    plt.close(fig)
    return Path(out_png)


def plot_ablation(curves: dict[int, list[float]], out_png: Path) -> Path:
    """One reward curve per group size G."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for group_size, rewards in sorted(curves.items()):
        ax.plot(range(1, len(rewards) + 1), rewards, label=f"G = {group_size}")
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.set_title("Group size ablation (reverse digits)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_png, dpi=80)
    plt.close(fig)
    return Path(out_png)
