"""GSM8K-style math word problems: the kit's trainer on a Hugging Face model you have on disk.

    task, policy = load_gsm8k("models/my-model", "data/train.jsonl")
    trainer = Trainer(GRPOConfig(**CONFIG_DEFAULTS), task, policy=policy, reward_funcs=REWARD_FUNCS)

The prompt asks for the curriculum's template, `<think> ... </think> <answer> 42 </answer>`;
the rewards are the curriculum's format and correctness rewards, weighted and summed by the
trainer (GRPOConfig.reward_weights). The data is a JSONL file with one {"question", "answer"}
object a line; an answer in GSM8K's form ("... reasoning ... #### 42") counts by its final number.
Questions differ in length, so a batch is left-padded and the task says which tokens are real.

Needs `transformers` (pip install -c constraints.txt -e '.[hf]'). Nothing is downloaded: the
model folder is one written by `save_pretrained` (weights, config and tokenizer files).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from reference.reward_functions import correctness_reward, format_reward, parse_number
from reference.tasks import Task

INSTRUCTION = (
    "Solve the math problem. Think it through step by step inside <think> </think>, then give "
    "only the final number inside <answer> </answer>."
)
PLAIN_TEMPLATE = "{instruction}\nQuestion: {question}\nResponse:"  # for tokenizers without chat

# Settings for a pretrained model (the GRPOConfig defaults suit the small GPT learning from
# scratch): TRL's learning rate and one update per batch. Command-line flags override them.
CONFIG_DEFAULTS = {
    "learning_rate": 1e-6, "num_iterations": 1, "prompts_per_step": 8, "max_steps": 200,
    "warmup_steps": 10, "max_completion_length": 256, "eval_size": 100, "save_steps": 50,
}  # fmt: skip


def format_score(completions: list[str], answers: list) -> list[float]:
    """format_reward with the trainer's (completions, answers) signature; answers don't matter."""
    return format_reward(completions)


REWARD_FUNCS = (format_score, correctness_reward)  # up to 1.0 each


def final_answer(answer: object) -> str:
    """The ground truth as a number string: GSM8K's "... #### 1,234" gives "1,234"."""
    text = str(answer)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip()


def read_jsonl(path: str | Path) -> list[tuple[str, str]]:
    """(question, final answer) pairs; a malformed line is reported with its number."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no data file at {path}: give a JSONL file of "
                                '{"question": ..., "answer": ...} lines')  # fmt: skip
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not JSON: {exc}") from exc
        if not isinstance(row, dict) or not {"question", "answer"} <= set(row):
            raise ValueError(f'{where}: expected an object with "question" and "answer"')
        answer = final_answer(row["answer"])
        if parse_number(answer) is None:
            raise ValueError(f"{where}: the answer {row['answer']!r} does not end in a number "
                             '(write it as "42" or in GSM8K\'s "... #### 42" form)')  # fmt: skip
        pairs.append((str(row["question"]), answer))
    if len(pairs) < 2:
        raise ValueError(
            f"{path} holds {len(pairs)} question(s): give at least 2 (one is held out)"
        )
    return pairs


class HFTokenizer:
    """A transformers tokenizer seen through the two things the trainer asks of a tokenizer:
    the EOS id(s) and `decode_batch`."""

    def __init__(self, tokenizer, eos_ids: list[int]):
        if not eos_ids:
            raise ValueError("the tokenizer and the model define no eos_token: set one, "
                             "e.g. tokenizer.eos_token = '</s>', and save_pretrained again")  # fmt: skip
        self.tokenizer = tokenizer
        self.eos_id = eos_ids  # several are common (e.g. end of turn and end of text)
        pad = tokenizer.pad_token_id
        self.pad_id = eos_ids[0] if pad is None else pad

    def encode_prompt(self, question: str) -> list[int]:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            messages = [{"role": "system", "content": INSTRUCTION},
                        {"role": "user", "content": question}]  # fmt: skip
            text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return tok(text, add_special_tokens=False)["input_ids"]  # the template has them
        return tok(PLAIN_TEMPLATE.format(instruction=INSTRUCTION, question=question))["input_ids"]

    def decode_batch(self, ids: torch.Tensor) -> list[str]:
        """Each row's text up to its first EOS."""
        eos = torch.tensor(self.eos_id)
        texts = []
        for row in ids.cpu():
            ends = torch.nonzero(torch.isin(row, eos)).flatten()
            kept = row[: int(ends[0])] if len(ends) else row
            texts.append(self.tokenizer.decode(kept.tolist(), skip_special_tokens=True))
        return texts


@dataclass
class GSM8KTask(Task):
    """Questions from a JSONL file; input n is question n. Batches are left-padded."""

    name: str = "gsm8k"
    num_inputs: int = 0
    prompt_length: int = 0  # the longest prompt (each batch is as long as its longest)
    max_completion_length: int = 256
    eval_size: int = 0
    tokenizer: HFTokenizer | None = None
    prompts: list[list[int]] = field(default_factory=list)  # token ids of each question
    answers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        starts_with_pad = [i for i, ids in enumerate(self.prompts) if ids[:1] == [self.pad_id]]
        if starts_with_pad:
            raise ValueError(
                f"{len(starts_with_pad)} prompt(s) start with the padding token (id {self.pad_id}), "
                "which would read as padding: give the tokenizer a pad_token of its own"
            )

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id

    def render(self, n: int) -> tuple[str, str]:
        return self.tokenizer.tokenizer.decode(self.prompts[n]), self.answers[n]

    def batch(self, inputs: list[int]) -> tuple[torch.Tensor, list[str]]:
        """Left-padded prompt ids (len(inputs), longest prompt) and the answers."""
        width = max(len(self.prompts[n]) for n in inputs)
        ids = torch.full((len(inputs), width), self.pad_id, dtype=torch.long)
        for row, n in enumerate(inputs):
            prompt = self.prompts[n]
            ids[row, width - len(prompt) :] = torch.tensor(prompt)
        return ids, [self.answers[n] for n in inputs]

    def prompt_mask(self, prompt_ids: torch.Tensor) -> torch.Tensor:
        """1 from each row's first non-pad token on: the padding is the leading pad tokens only
        (a pad id inside a prompt, e.g. an end-of-turn token used as pad, stays real)."""
        return ((prompt_ids != self.pad_id).long().cumsum(dim=1) > 0).long()

    def reward(self, completions: list[str], answers: list) -> list[float]:
        """Format plus correctness, unweighted: the reward the evaluation table shows."""
        scores = [func(completions, answers) for func in REWARD_FUNCS]
        return [sum(parts) for parts in zip(*scores, strict=True)]

    def exact_match(self, completions: list[str], answers: list) -> list[float]:
        return correctness_reward(completions, answers)


def require_transformers():
    try:
        import transformers
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "the GSM8K pipeline needs transformers: pip install -c constraints.txt -e '.[hf]'"
        ) from exc
    return transformers


def load_model(path: str | Path) -> tuple[torch.nn.Module, object]:
    """A causal LM and its tokenizer from a local folder, in float32 (bf16 autocast on CUDA
    comes from the trainer: AdamW on bf16 weights would lose small updates)."""
    transformers = require_transformers()
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"{folder} has no config.json: --model must be a local folder written by "
            "save_pretrained (model weights, config and tokenizer files); nothing is downloaded"
        )
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, dtype=torch.float32
    )
    return model, tokenizer


def eos_ids_of(model: torch.nn.Module, tokenizer) -> list[int]:
    """The tokenizer's EOS id, then any other the model's generation config stops on."""
    ids = [tokenizer.eos_token_id]
    generation = getattr(model, "generation_config", None)
    extra = getattr(generation, "eos_token_id", None)
    ids += extra if isinstance(extra, list) else [extra]
    return list(dict.fromkeys(i for i in ids if i is not None))  # ordered, no duplicates


def load_gsm8k(
    model_path: str | Path,
    data_path: str | Path,
    max_completion_length: int = 256,
    eval_size: int = 100,
) -> tuple[GSM8KTask, torch.nn.Module]:
    """The task (questions tokenized once) and the policy to train. At most a tenth of the
    questions, and at most `eval_size`, are held out for the final evaluation."""
    model, tokenizer = load_model(model_path)
    wrapped = HFTokenizer(tokenizer, eos_ids_of(model, tokenizer))
    pairs = read_jsonl(data_path)
    held_out = max(1, min(eval_size, len(pairs) // 10))
    task = GSM8KTask(
        num_inputs=len(pairs), max_completion_length=max_completion_length, eval_size=held_out,
        tokenizer=wrapped, prompts=[wrapped.encode_prompt(q) for q, _ in pairs],
        answers=[a for _, a in pairs],
    )  # fmt: skip
    task.prompt_length = max(len(p) for p in task.prompts)
    return task, model
