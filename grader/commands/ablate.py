"""`grpo-kit ablate`: train the default task with G = 2, 4, 8, 16 and plot the reward curves."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "group-size ablation: train the default task with G = 2, 4, 8, 16; one plot of the rewards"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--group-sizes", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--output-dir", type=Path, default=Path("runs/ablation"))
    parser.add_argument("--device", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: measured fastest for the small GPT)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import torch

    from reference.grpo_config import GRPOConfig
    from reference.plots import plot_ablation, read_metrics
    from reference.tasks import get_task
    from reference.trainer import Trainer

    if args.threads < 1:
        print(f"error: --threads must be at least 1, got {args.threads}")
        return 2
    torch.set_num_threads(args.threads)
    curves = {}
    for group_size in args.group_sizes:
        # Same prompts per step for every G: a larger group costs more samples per step.
        config = GRPOConfig(num_generations=group_size, max_steps=args.max_steps, seed=args.seed,
                            output_dir=str(args.output_dir / f"G{group_size}"), save_steps=0,
                            eval_steps=0, log_completions=False)  # fmt: skip
        print(f"G = {group_size}")
        trainer = Trainer(config, get_task("reverse"), device=args.device)
        trainer.train()
        curves[group_size] = [row["reward"] for row in read_metrics(trainer.metrics_path)]
        print(f"  final reward {curves[group_size][-1]:.3f}")
    plot = plot_ablation(curves, args.output_dir / "group_size_ablation.png")
    print(f"plot: {plot}")
    return 0
