"""`grpo-kit train`: train a small GPT with GRPO on a generated task and show it learning."""

from __future__ import annotations

import argparse
import sys

HELP = "train a small GPT with GRPO on a generated task (digit reversal by default)"

# GRPOConfig options exposed as flags, with TRL's names; unset flags keep GRPOConfig's defaults.
FLAGS = {
    "num_generations": int, "max_completion_length": int, "temperature": float, "top_k": int,
    "top_p": float, "beta": float, "epsilon": float, "epsilon_high": float, "loss_type": str,
    "scale_rewards": str, "num_iterations": int, "learning_rate": float, "max_grad_norm": float,
    "warmup_steps": int, "lr_scheduler_type": str, "max_steps": int, "prompts_per_step": int,
    "gradient_accumulation_steps": int, "save_steps": int, "eval_size": int,
}  # fmt: skip


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default="reverse", choices=("reverse", "addition"))
    parser.add_argument("--output-dir", default="runs/grpo", help="metrics, plots, checkpoint")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint there")
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: the best there is)")
    parser.add_argument("--seed", type=int, default=0)
    group = parser.add_argument_group("GRPOConfig options (TRL's names; see reference/grpo_config.py)")
    for name, kind in FLAGS.items():
        group.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None, metavar=kind.__name__.upper())


def run(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from reference.grpo_config import GRPOConfig
    from reference.plots import plot_run
    from reference.tasks import get_task
    from reference.trainer import Trainer

    options = {name: getattr(args, name) for name in FLAGS if getattr(args, name) is not None}
    try:
        config = GRPOConfig(seed=args.seed, output_dir=args.output_dir, **options)
        trainer = Trainer(config, get_task(args.task), device=args.device)
        if trainer.rank == 0:
            print(f"task {args.task}: {trainer.policy.num_parameters():,} parameters on "
                  f"{trainer.device}, {config.max_steps} steps of {config.prompts_per_step} "
                  f"prompts x G={config.num_generations}; writing to {config.output_dir}")  # fmt: skip
        trainer.train(resume=args.resume)
        if trainer.rank == 0:
            report(trainer, plot_run(trainer.metrics_path, trainer.output_dir / "training.png"))
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return 0


def report(trainer, plot) -> None:
    """The final greedy evaluation against the untrained starting point, as a table."""
    results = trainer.evaluate()
    n = min(trainer.config.eval_size, len(trainer.task.inputs("eval")))
    print(f"\nGreedy decoding on {n} held-out inputs:")
    print(f"  {'model':<20}{'exact match':>12}{'reward':>9}")
    for label, key in (("untrained (start)", "before"), ("trained", "after")):
        print(f"  {label:<20}{results[key]['exact_match']:>12.3f}{results[key]['reward']:>9.3f}")
    print(f"\nmetrics:    {trainer.metrics_path}\nplots:      {plot}")
    print(f"checkpoint: {trainer.checkpoint_path} (continue with --resume)")
