"""Benchmark: the kit's GRPO trainer against TRL's GRPOTrainer, same model, same task, one run.

    .venv/bin/python bench/bench_trainer.py                  # CPU, a few minutes on 2 cores
    .venv/bin/python bench/bench_trainer.py --device cuda    # on a GPU, bf16 autocast for both
    .venv/bin/python bench/bench_trainer.py --device cuda --model qwen2-0.5b   # GPU throughput

`--model qwen2-0.5b` builds a Qwen2-shaped model of about 0.5B parameters from a config
(random weights, nothing downloaded) and runs both trainers with the same GPU settings: 16
prompts x G=8 per step, 256-token completions (a random model never stops early), one update
per batch in 4 micro-batches, lr 1e-6, beta 0, bf16 autocast. It prints, for each trainer,
steps per second after the first step (which compiles), generated tokens per second (the kit:
its sampler's time; TRL: the time inside transformers' `generate`), the peak GPU memory and
the update's model FLOP utilisation: 6 x parameters x tokens over the update's time (the kit:
its optimize(); TRL: the step minus generation), against --peak-tflops (H100 SXM bf16 dense).

Both train the same randomly initialised Llama-style model (built from a config, nothing is
downloaded) on the kit's default task, reversing 4 digits with a dense reward, with the same
settings: prompts per step, group size, completion length, learning rate, beta, epsilon,
num_iterations, loss type, gradient clipping, constant schedule. TRL generates with
transformers' `generate` (no vLLM). A "step" is one GRPO step: a batch of groups generated,
scored and used for num_iterations optimizer updates (TRL counts each update as a step).

Printed for each trainer: steps per second (wall clock over the whole run, and from the median
step, which a busy machine disturbs less), the mean reward of the last steps, the greedy exact
match on held-out inputs (the same evaluation for both), generated tokens per second; then the
throughput ratio. TRL is needed for this script only:

    .venv/bin/pip install -c constraints.txt trl==1.16.0
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import reference.grpo_trainer as reference_step
from reference.grpo_config import GRPOConfig
from reference.tasks import CharTokenizer, ReverseDigits, Task
from reference.trainer import Trainer, evaluate

TRL_VERSION = "1.16.0"
CONSTRAINTS = Path(__file__).resolve().parents[1] / "constraints.txt"
INSTALL = f"{sys.executable} -m pip install -c {CONSTRAINTS} trl=={TRL_VERSION}"


@dataclass
class Settings:
    steps: int
    prompts_per_step: int
    num_generations: int
    learning_rate: float
    beta: float
    num_iterations: int
    device: str
    seed: int
    threads: int
    trl_gradient_checkpointing: bool
    last: int  # the reward is averaged over this many last steps
    eval_size: int
    model: str = "tiny-llama"
    max_completion_length: int | None = None  # None: the task's
    gradient_accumulation_steps: int = 1
    peak_tflops: float = 989.0


QWEN2_05B = dict(  # Qwen2-0.5B's shape
    hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6,
    max_position_embeddings=32768, rms_norm_eps=1e-6,
)  # fmt: skip
# The settings --model qwen2-0.5b runs with (flags given explicitly still win).
GPU_SETTINGS = dict(steps=6, prompts_per_step=16, num_generations=8, learning_rate=1e-6,
                    beta=0.0, num_iterations=1, max_completion_length=256,
                    gradient_accumulation_steps=4, eval_size=0)  # fmt: skip


@dataclass
class Result:
    name: str
    seconds: float  # the whole training loop, wall clock
    step_seconds: list[float]  # one per GRPO step
    rewards: list[float]  # mean reward of each step's completions
    generated_tokens: int  # completion tokens sampled over the run
    evaluation: dict = field(default_factory=dict)
    generation_seconds: list[float] = field(default_factory=list)  # per step
    update_seconds: list[float] = field(default_factory=list)  # per step
    step_tokens: list[int] = field(default_factory=list)  # generated tokens per step
    peak_memory: float = 0.0  # bytes, CUDA only

    def steps_per_second(self) -> float:
        return len(self.step_seconds) / self.seconds

    def median_steps_per_second(self) -> float:
        return 1.0 / statistics.median(self.step_seconds)


def tiny_llama(task: Task, folder: Path, seed: int):
    """A ~130K-parameter Llama saved to `folder` (TRL builds its reference model from a path)."""
    import transformers

    torch.manual_seed(seed)
    tok = task.tokenizer
    config = transformers.LlamaConfig(
        vocab_size=tok.vocab_size, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
        max_position_embeddings=task.prompt_length + task.max_completion_length,
        pad_token_id=tok.pad_id, eos_token_id=tok.eos_id, bos_token_id=None,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    char_tokenizer(task).save_pretrained(folder)
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)


def qwen2_half_billion(task: Task, folder: Path, seed: int):
    """Qwen2-0.5B's shape with random weights, saved to `folder`; the task's tokenizer grows
    placeholder tokens up to the model's vocabulary so that any sampled id decodes."""
    import transformers

    tok = task.tokenizer
    tok.tokens += [f"<{i}>" for i in range(len(tok.tokens), QWEN2_05B["vocab_size"])]
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(**QWEN2_05B, pad_token_id=tok.pad_id,
                                      eos_token_id=tok.eos_id, bos_token_id=None)  # fmt: skip
    transformers.Qwen2ForCausalLM(config).save_pretrained(folder)
    char_tokenizer(task).save_pretrained(folder)
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)


def char_tokenizer(task: Task):
    """The task's character tokenizer as a transformers tokenizer: same ids, same decoding."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = task.tokenizer
    assert isinstance(tok, CharTokenizer)
    backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tok.tokens)}, unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # a character
    backend.decoder = decoders.Fuse()  # join characters without spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=tok.tokens[tok.pad_id], eos_token=tok.tokens[tok.eos_id]
    )


def run_kit(model, task: Task, s: Settings, workdir: Path) -> Result:
    from tqdm.auto import tqdm

    config = GRPOConfig(
        max_steps=s.steps, prompts_per_step=s.prompts_per_step, num_generations=s.num_generations,
        max_completion_length=s.max_completion_length or task.max_completion_length,
        learning_rate=s.learning_rate, beta=s.beta, num_iterations=s.num_iterations, epsilon=0.2,
        loss_type="dapo", scale_rewards="group", max_grad_norm=1.0, lr_scheduler_type="constant",
        seed=s.seed, output_dir=str(workdir / "kit"), save_steps=0, eval_steps=0,
        log_completions=False, gradient_accumulation_steps=s.gradient_accumulation_steps,
    )  # fmt: skip
    trainer = Trainer(config, task, policy=model, device=s.device, show_progress=False)
    updates = _timed(reference_step, "optimize", s.device)  # the update's own time
    rows = s.prompts_per_step * s.num_generations
    result = Result("kit", 0.0, [], [], 0)
    _reset_memory(s.device)
    start = time.perf_counter()
    for _ in tqdm(range(s.steps), desc="kit", unit="step", leave=False):
        metrics = trainer.train_step()
        _synchronize(s.device)
        result.step_seconds.append(metrics["step_time"])
        result.rewards.append(metrics["reward"])
        tokens = round(metrics["completions/mean_length"] * rows)
        result.step_tokens.append(tokens)
        result.generation_seconds.append(trainer.sampler.seconds)
        result.update_seconds.append(updates.pop())
    result.seconds = time.perf_counter() - start
    result.generated_tokens = sum(result.step_tokens)
    result.peak_memory = _peak_memory(s.device)
    updates.restore()
    return result


def run_trl(model, task: Task, s: Settings, workdir: Path) -> Result:
    import trl
    from datasets import Dataset
    from tqdm.auto import tqdm
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    train = task.inputs("train")
    pairs = [task.render(n) for n in train]
    dataset = Dataset.from_dict({"prompt": [p for p, _ in pairs], "answer": [a for _, a in pairs]})

    def reward(completions: list[str], answer: list[str], **_) -> list[float]:
        return task.reward(completions, answer)

    class StepClock(TrainerCallback):
        """Wall-clock time of each optimizer update (TRL's own step_time leaves parts out)."""

        def __init__(self):
            self.stamps, self.generated = [], []  # time, and time spent generating, so far
            self.generations: _timed | None = None
            self.bar = tqdm(
                total=s.steps * s.num_iterations, desc="TRL", unit="update", leave=False
            )

        def on_step_end(self, args, state, control, **kwargs):
            _synchronize(s.device)
            self.stamps.append(time.perf_counter())
            self.generated.append(self.generations.total if self.generations else 0.0)
            self.bar.update(1)

    cuda = s.device.startswith("cuda")
    micro = s.prompts_per_step * s.num_generations // s.gradient_accumulation_steps
    args = trl.GRPOConfig(
        output_dir=str(workdir / "trl"), max_steps=s.steps * s.num_iterations,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=s.gradient_accumulation_steps,
        steps_per_generation=s.gradient_accumulation_steps, num_generations=s.num_generations,
        max_completion_length=s.max_completion_length or task.max_completion_length,
        learning_rate=s.learning_rate, beta=s.beta, num_iterations=s.num_iterations, epsilon=0.2,
        loss_type="dapo", scale_rewards="group", max_grad_norm=1.0, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, temperature=1.0, top_k=0, top_p=1.0, seed=s.seed,
        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
        use_cpu=not cuda, bf16=cuda, use_vllm=False, dataloader_num_workers=0,
        # TRL's default recomputes activations in the backward pass, trading time for memory;
        # off by default here, as in the kit, which keeps the activations too.
        gradient_checkpointing=s.trl_gradient_checkpointing,
    )  # fmt: skip
    clock = StepClock()
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=reward, args=args, train_dataset=dataset,
        processing_class=char_tokenizer(task), callbacks=[clock],
    )  # fmt: skip
    for noisy in (PrinterCallback, ProgressCallback):  # it prints every step's logs
        trainer.remove_callback(noisy)
    generations = _timed(model, "generate", s.device)  # transformers' generate, timed
    clock.generations = generations
    _reset_memory(s.device)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    clock.bar.close()
    generations.restore()
    # One GRPO step = num_iterations updates on one generated batch: it ends with its last one.
    ends = clock.stamps[s.num_iterations - 1 :: s.num_iterations]
    step_seconds = [b - a for a, b in zip([start, *ends[:-1]], ends, strict=True)]
    logged = [row for row in trainer.state.log_history if row.get("reward") is not None]
    rows = s.prompts_per_step * s.num_generations
    step_tokens = [round(row["completions/mean_length"] * rows) for row in logged]
    result = Result("TRL", seconds, step_seconds, [row["reward"] for row in logged],
                    sum(step_tokens), step_tokens=step_tokens)  # fmt: skip
    generated = clock.generated[s.num_iterations - 1 :: s.num_iterations]
    result.generation_seconds = [b - a for a, b in zip([0.0, *generated[:-1]], generated,
                                                       strict=True)]  # fmt: skip
    result.update_seconds = [t - g for t, g in zip(step_seconds, result.generation_seconds,
                                                   strict=True)]  # fmt: skip
    result.peak_memory = _peak_memory(s.device)
    return result


class _timed:
    """Times every call of owner.name (a module function or a model's method) until restore()."""

    def __init__(self, owner, name: str, device: str):
        self.owner, self.name, self.calls, self.total = owner, name, [], 0.0
        self.original = getattr(owner, name)
        had_own = name in vars(owner)

        def timed(*args, **kwargs):
            _synchronize(device)
            start = time.perf_counter()
            out = self.original(*args, **kwargs)
            _synchronize(device)
            self.calls.append(time.perf_counter() - start)
            self.total += self.calls[-1]
            return out

        self.had_own = had_own
        setattr(owner, name, timed)

    def pop(self) -> float:
        total = sum(self.calls)
        self.calls.clear()
        return total

    def restore(self) -> None:
        if self.had_own:
            setattr(self.owner, self.name, self.original)
        else:
            delattr(self.owner, self.name)


def _reset_memory(device: str) -> None:
    """Free what an earlier run left (its compiled graphs hold on to its model), then count."""
    gc.collect()
    torch._dynamo.reset()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_memory(device: str) -> float:
    return torch.cuda.max_memory_allocated() if device.startswith("cuda") else 0.0


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def report(results: list[Result], s: Settings, parameters: int, sequence: int) -> None:
    print(f"\n{s.model}: {parameters / 1e6:.1f}M parameters; {s.steps} GRPO steps of "
          f"{s.prompts_per_step} prompts x G={s.num_generations}, num_iterations="
          f"{s.num_iterations}, lr={s.learning_rate}, beta={s.beta}, on {s.device}, {s.threads} "
          f"thread(s); TRL gradient checkpointing "
          f"{'on' if s.trl_gradient_checkpointing else 'off'}")  # fmt: skip
    header = (f"  {'trainer':<8}{'steps/s':>9}{'median':>9}{'tokens/s':>10}"
              f"{f'reward (last {s.last})':>20}{'held-out exact':>16}{'time':>8}")  # fmt: skip
    print(header)
    for r in results:
        last = statistics.fmean(r.rewards[-s.last :])
        exact = r.evaluation.get("exact_match", float("nan"))
        print(f"  {r.name:<8}{r.steps_per_second():>9.3f}{r.median_steps_per_second():>9.3f}"
              f"{r.generated_tokens / r.seconds:>10.0f}{last:>20.3f}"
              f"{exact:>16.3f}{r.seconds:>7.0f}s")  # fmt: skip
    kit, trl = results
    print(f"\nthroughput, kit / TRL: {kit.steps_per_second() / trl.steps_per_second():.2f}x "
          f"(wall clock), {kit.median_steps_per_second() / trl.median_steps_per_second():.2f}x "
          "(median step); target >= 2x at equal or better reward")  # fmt: skip
    if not (s.device.startswith("cuda") or s.model == "qwen2-0.5b"):
        return
    # GPU figures, leaving out the first step (compilation, CUDA graph capture, warm-up).
    print(f"\nafter the first step; MFU against {s.peak_tflops:.0f} TFLOP/s (bf16 dense)")
    print(f"  {'trainer':<8}{'steps/s':>9}{'gen tokens/s':>14}{'update MFU':>12}{'peak GiB':>10}")
    rates = {}
    for r in results:
        steady = slice(1, None) if len(r.step_seconds) > 1 else slice(None)
        steps = len(r.step_seconds[steady]) / sum(r.step_seconds[steady])
        rates[r.name] = sum(r.step_tokens[steady]) / max(sum(r.generation_seconds[steady]), 1e-9)
        rows = s.prompts_per_step * s.num_generations
        flops = 6 * parameters * rows * sequence * len(r.update_seconds[steady])
        mfu = flops / max(sum(r.update_seconds[steady]), 1e-9) / (s.peak_tflops * 1e12)
        print(f"  {r.name:<8}{steps:>9.3f}{rates[r.name]:>14.0f}{mfu:>12.1%}"
              f"{r.peak_memory / 2**30:>10.1f}")  # fmt: skip
    print(f"\ngeneration, kit / TRL (transformers generate): {rates['kit'] / rates['TRL']:.2f}x; "
          "targets: >= 3x, and the kit's update at >= 40% MFU")  # fmt: skip


def parse_args(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--prompts-per-step", type=int, default=32)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--num-iterations", type=int, default=4)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--last", type=int, default=5, help="steps the final reward averages")
    parser.add_argument("--eval-size", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: tiny matrices gain nothing from more, and a "
                             "busy machine slows several threads down far more than one)")  # fmt: skip
    parser.add_argument("--trl-gradient-checkpointing", action="store_true",
                        help="TRL's own default: recompute activations in the backward pass")  # fmt: skip
    parser.add_argument("--model", choices=("tiny-llama", "qwen2-0.5b"), default="tiny-llama",
                        help="qwen2-0.5b: the GPU benchmark, with its own defaults (see above)")  # fmt: skip
    parser.add_argument("--max-completion-length", type=int, default=None)
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="the GPU's bf16 dense peak, for MFU (H100 SXM: 989)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.model == "qwen2-0.5b":  # its defaults, unless a flag says otherwise
        given = {a.dest for a in parser._actions if any(o in (argv or sys.argv[1:])
                                                        for o in a.option_strings)}  # fmt: skip
        for name, value in GPU_SETTINGS.items():
            if name not in given:
                setattr(args, name, value)
    return Settings(**vars(args))


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    try:
        import transformers
        import trl  # noqa: F401
    except ModuleNotFoundError as exc:
        print(f"{exc.name} is missing; this benchmark needs TRL (and transformers):\n"
              f"  {INSTALL}", file=sys.stderr)  # fmt: skip
        return 2
    if settings.device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda: no CUDA device is visible", file=sys.stderr)
        return 2
    torch.set_num_threads(settings.threads)
    transformers.utils.logging.disable_progress_bar()  # no bars for loading a tiny model
    task = ReverseDigits()
    held_out = task.inputs("eval")[: settings.eval_size]
    build = qwen2_half_billion if settings.model == "qwen2-0.5b" else tiny_llama
    with tempfile.TemporaryDirectory() as folder:
        workdir = Path(folder)
        start = build(task, workdir / "model", settings.seed)
        parameters = sum(p.numel() for p in start.parameters())
        results = []
        for run in (run_kit, run_trl):
            model = copy.deepcopy(start)
            result = run(model, task, settings, workdir)
            if held_out:
                result.evaluation = evaluate(model.to(settings.device).eval(), task, held_out)
            results.append(result)
            del model
    sequence = task.prompt_length + (settings.max_completion_length or task.max_completion_length)
    report(results, settings, parameters, sequence)
    return 0


if __name__ == "__main__":
    sys.exit(main())
