"""`grpo-kit train`: GRPO that shows it learning, on a small GPT and a generated task, or on a
local Hugging Face model and GSM8K-style questions (`--task gsm8k --model DIR --data FILE`),
with LoRA (`--use-peft`) and gradient checkpointing as options."""

from __future__ import annotations

import argparse
import sys

HELP = (
    "train a small GPT with GRPO on a generated task (digit reversal by default), or a local "
    "Hugging Face model on GSM8K-style questions (--task gsm8k --model DIR --data FILE.jsonl)"
)
# Torch threads for the kit's small GPT: its matrices are tiny, so one thread does not wait on
# another; measured on a shared 2-core CPU, 1 thread ran the default task 2.4-3x faster than 2.
SMALL_MODEL_THREADS = 1

# GRPOConfig options exposed as flags, with TRL's names; unset flags keep GRPOConfig's defaults.
FLAGS = {
    "num_generations": int, "max_completion_length": int, "temperature": float, "top_k": int,
    "top_p": float, "beta": float, "epsilon": float, "epsilon_high": float, "loss_type": str,
    "scale_rewards": str, "num_iterations": int, "learning_rate": float, "max_grad_norm": float,
    "warmup_steps": int, "lr_scheduler_type": str, "max_steps": int, "prompts_per_step": int,
    "gradient_accumulation_steps": int, "save_steps": int, "eval_size": int, "eval_steps": int,
    "logging_steps": int, "num_completions_to_print": int, "cache_implementation": str,
    "stop_check_interval": int, "report_to": str,
}  # fmt: skip
# GRPOConfig's on/off options: --NAME / --no-NAME.
SWITCHES = ("gradient_checkpointing", "disable_dropout", "cast_lm_head_to_fp32",
            "log_completions", "compile_generation", "bf16")  # fmt: skip


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default="reverse", choices=("reverse", "addition", "gsm8k"))
    parser.add_argument("--model", help="gsm8k: a local model folder written by save_pretrained")
    parser.add_argument("--data", help='gsm8k: a JSONL file of {"question", "answer"} lines, '
                        "or any local file or save_to_disk folder datasets reads")  # fmt: skip
    parser.add_argument("--reward-weights", type=float, nargs="+", default=None, metavar="W",
                        help="one weight per reward function (gsm8k: format, correctness)")  # fmt: skip
    parser.add_argument("--output-dir", default="runs/grpo", help="metrics, plots, checkpoint")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint there")
    parser.add_argument(
        "--device", default=None, help="cpu, cuda, mps (default: the best there is)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None,
                        help=f"torch CPU threads (default: {SMALL_MODEL_THREADS} for the small "
                             "GPT, measured fastest; torch's own default for --model)")  # fmt: skip
    group = parser.add_argument_group(
        "GRPOConfig options (TRL's names; see reference/grpo_config.py)"
    )
    for name, kind in FLAGS.items():
        group.add_argument(
            f"--{name.replace('_', '-')}", type=kind, default=None, metavar=kind.__name__.upper()
        )
    for name in SWITCHES:
        group.add_argument(f"--{name.replace('_', '-')}", action=argparse.BooleanOptionalAction,
                           default=None)  # fmt: skip
    lora = parser.add_argument_group("LoRA (TRL's ModelConfig names; needs peft: '.[lora]')")
    lora.add_argument("--use-peft", action="store_true", help="train LoRA adapters only")
    lora.add_argument("--lora-r", type=int, default=16)
    lora.add_argument("--lora-alpha", type=int, default=32)
    lora.add_argument("--lora-dropout", type=float, default=0.05)
    lora.add_argument("--lora-target-modules", nargs="+", default=None, metavar="NAME",
                      help="module names to adapt (default: peft's choice for the model)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from reference.grpo_config import GRPOConfig
    from reference.plots import plot_run
    from reference.trainer import Trainer

    options = {name: getattr(args, name) for name in (*FLAGS, *SWITCHES)
               if getattr(args, name) is not None}  # fmt: skip
    if args.reward_weights is not None:
        options["reward_weights"] = args.reward_weights
    try:
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads must be at least 1, got {args.threads}")
        threads = args.threads or (SMALL_MODEL_THREADS if args.task != "gsm8k" else None)
        if threads:
            torch.set_num_threads(threads)
        task, policy, reward_funcs, defaults = build_task(args, options)
        config = GRPOConfig(seed=args.seed, output_dir=args.output_dir, **{**defaults, **options})
        trainer = Trainer(config, task, policy=policy, reward_funcs=reward_funcs,
                          device=args.device, peft_config=lora_config(args))  # fmt: skip
        if trainer.rank == 0:
            total = sum(p.numel() for p in trainer.policy.parameters())
            trained = sum(p.numel() for p in trainer.policy.parameters() if p.requires_grad)
            print(f"task {args.task}: {total:,} parameters ({trained:,} trained) on "
                  f"{trainer.device}, {torch.get_num_threads()} CPU thread(s), "
                  f"{config.max_steps} steps of {config.prompts_per_step} prompts x "
                  f"G={config.num_generations}; writing to {config.output_dir}")  # fmt: skip
        trainer.train(resume=args.resume)
        if trainer.rank == 0:
            report(trainer, plot_run(trainer.metrics_path, trainer.output_dir / "training.png"))
            if args.task == "gsm8k":  # also in the format the model came in
                trainer.policy.save_pretrained(trainer.output_dir / "model")
                task.tokenizer.tokenizer.save_pretrained(trainer.output_dir / "model")
                kind = "LoRA adapter, peft" if args.use_peft else "save_pretrained"
                print(f"model:      {trainer.output_dir / 'model'} ({kind} format)")
    except (ValueError, FileNotFoundError, ModuleNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return 0


def lora_config(args: argparse.Namespace):
    """A peft.LoraConfig from the --lora-* flags, or None without --use-peft."""
    if not args.use_peft:
        return None
    try:
        import peft
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "--use-peft needs peft: pip install -c constraints.txt -e '.[lora]'"
        ) from exc
    return peft.LoraConfig(
        r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
        target_modules=args.lora_target_modules, task_type="CAUSAL_LM",
    )  # fmt: skip


def build_task(args: argparse.Namespace, options: dict) -> tuple:
    """(task, policy, reward functions, config defaults); None policy: the kit's small GPT."""
    if args.task != "gsm8k":
        if args.model or args.data:
            raise ValueError("--model and --data go with --task gsm8k")
        if args.use_peft:
            raise ValueError("--use-peft trains a transformers model: use it with --task gsm8k")
        from reference.tasks import get_task

        task = get_task(args.task)
        return task, None, None, dict(task.config_defaults)
    if not (args.model and args.data):
        raise ValueError("--task gsm8k needs --model DIR (a model saved with save_pretrained) "
                         'and --data FILE.jsonl (one {"question", "answer"} object a line)')  # fmt: skip
    from reference.gsm8k import CONFIG_DEFAULTS, REWARD_FUNCS, load_gsm8k

    settings = {**CONFIG_DEFAULTS, **options}
    task, policy = load_gsm8k(args.model, args.data, settings["max_completion_length"],
                              settings["eval_size"])  # fmt: skip
    return task, policy, list(REWARD_FUNCS), CONFIG_DEFAULTS


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
