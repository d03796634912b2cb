"""GSM8K-style math word problems: the kit's trainer on a Hugging Face model you have on disk.

    task, policy = load_gsm8k("models/my-model", "data/train.jsonl")
    trainer = Trainer(GRPOConfig(**CONFIG_DEFAULTS), task, policy=policy, reward_funcs=REWARD_FUNCS)

The prompt asks for the curriculum's template, `<think> ... </think> <answer> 42 </answer>`;
the rewards are the curriculum's format and correctness rewards, weighted and summed by the
trainer (GRPOConfig.reward_weights). The data is read by the `datasets` library from a local
file (JSONL, JSON, CSV, Parquet) or a folder written by `save_to_disk`: one row per question,
with a "question" (or "prompt") column and an "answer" column; an answer in GSM8K's form
("... reasoning ... #### 42") counts by its final number. Every other column reaches the
reward functions as a keyword argument, as in TRL. Questions differ in length, so a batch is
left-padded and the task says which tokens are real.

Needs `transformers` and `datasets` (pip install -c constraints.txt -e '.[hf]'). Nothing is
downloaded: the model folder is one written by `save_pretrained` (weights, config, tokenizer).
"""

from __future__ import annotations

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
    "eval_steps": 50,
}  # fmt: skip
PROMPT_COLUMNS = ("question", "prompt")  # the first one a row has is the question
SUFFIX_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet",
                  ".arrow": "arrow"}  # fmt: skip


# The rewards, as TRL calls them: keyword arguments, the data's columns among them.
def format_score(completions: list[str], **kwargs) -> list[float]:
    """The curriculum's format_reward: up to 1.0 for the think and answer blocks."""
    return format_reward(completions)


def correctness_score(completions: list[str], answer: list, **kwargs) -> list[float]:
    """The curriculum's correctness_reward: 1.0 when the answer block holds the right number."""
    return correctness_reward(completions, answer)


REWARD_FUNCS = (format_score, correctness_score)  # up to 1.0 each


def final_answer(answer: object) -> str:
    """The ground truth as a number string: GSM8K's "... #### 1,234" gives "1,234"."""
    text = str(answer)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip()


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a local data file (or `save_to_disk` folder), read by `datasets`, each with
    "question" (the question or prompt text) and "answer" (its final number), plus every other
    column. A malformed row is reported with its number."""
    path = Path(path)
    rows = [dict(row) for row in _load_dataset(path)]
    checked = []
    for number, row in enumerate(rows, start=1):
        where = f"{path}, row {number}"
        question = next((row.pop(c) for c in PROMPT_COLUMNS if row.get(c) is not None), None)
        for column in PROMPT_COLUMNS:
            row.pop(column, None)
        if question is None or row.get("answer") is None:
            raise ValueError(f'{where}: expected a "question" (or "prompt") and an "answer"')
        answer = final_answer(row["answer"])
        if parse_number(answer) is None:
            raise ValueError(f"{where}: the answer {row['answer']!r} does not end in a number "
                             '(write it as "42" or in GSM8K\'s "... #### 42" form)')  # fmt: skip
        checked.append({**row, "question": str(question), "answer": answer})
    if len(checked) < 2:
        raise ValueError(
            f"{path} holds {len(checked)} question(s): give at least 2 (one is held out)"
        )
    return checked


def _load_dataset(path: Path):
    """A `datasets.Dataset` from a local file or save_to_disk folder; errors say which."""
    try:
        import datasets
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "--data is read with datasets: pip install -c constraints.txt -e '.[hf]'"
        ) from exc
    if path.is_dir():
        loaded = datasets.load_from_disk(str(path))
        return loaded["train"] if isinstance(loaded, datasets.DatasetDict) else loaded
    if not path.is_file():
        raise FileNotFoundError(f"no data file at {path}: give a JSONL file of "
                                '{"question": ..., "answer": ...} lines (or CSV, Parquet)')  # fmt: skip
    kind = SUFFIX_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise ValueError(f"{path}: unknown data format {path.suffix!r}; use one of "
                         f"{', '.join(SUFFIX_FORMATS)} or a save_to_disk folder")  # fmt: skip
    datasets.disable_progress_bars()
    try:
        return datasets.load_dataset(kind, data_files=str(path), split="train")
    except Exception as exc:  # datasets wraps the parser's error in its own
        cause = exc.__cause__ or exc
        raise ValueError(f"{path} could not be read as {kind}: {cause}") from exc


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

    def decode_prompts(self, ids: torch.Tensor, mask: torch.Tensor | None) -> list[str]:
        """Each left-padded prompt's real tokens, special tokens (the chat template's) kept."""
        rows = ids.cpu().tolist()
        keep = [[1] * len(r) for r in rows] if mask is None else mask.cpu().tolist()
        return [self.tokenizer.decode([t for t, k in zip(row, kept, strict=True) if k])
                for row, kept in zip(rows, keep, strict=True)]  # fmt: skip

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
    """Questions from a data file; input n is question n. Batches are left-padded. The answers
    a batch gives are its rows, as dicts of their columns (the reward functions' keywords)."""

    name: str = "gsm8k"
    num_inputs: int = 0
    prompt_length: int = 0  # the longest prompt (each batch is as long as its longest)
    max_completion_length: int = 256
    eval_size: int = 0
    tokenizer: HFTokenizer | None = None
    prompts: list[list[int]] = field(default_factory=list)  # token ids of each question
    rows: list[dict] = field(default_factory=list)  # "answer" (a number string) and the rest

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
        return self.tokenizer.tokenizer.decode(self.prompts[n]), self.rows[n]["answer"]

    def batch(self, inputs: list[int]) -> tuple[torch.Tensor, list[dict]]:
        """Left-padded prompt ids (len(inputs), longest prompt) and the rows."""
        width = max(len(self.prompts[n]) for n in inputs)
        ids = torch.full((len(inputs), width), self.pad_id, dtype=torch.long)
        for row, n in enumerate(inputs):
            prompt = self.prompts[n]
            ids[row, width - len(prompt) :] = torch.tensor(prompt)
        return ids, [self.rows[n] for n in inputs]

    def prompt_mask(self, prompt_ids: torch.Tensor) -> torch.Tensor:
        """1 from each row's first non-pad token on: the padding is the leading pad tokens only
        (a pad id inside a prompt, e.g. an end-of-turn token used as pad, stays real)."""
        return ((prompt_ids != self.pad_id).long().cumsum(dim=1) > 0).long()

    def reward(self, completions: list[str], answers: list) -> list[float]:
        """Format plus correctness, unweighted: the reward the evaluation table shows."""
        answer = [_answer_of(a) for a in answers]
        scores = [func(completions=completions, answer=answer) for func in REWARD_FUNCS]
        return [sum(parts) for parts in zip(*scores, strict=True)]

    def exact_match(self, completions: list[str], answers: list) -> list[float]:
        return correctness_reward(completions, [_answer_of(a) for a in answers])


def _answer_of(answer: object) -> object:
    """A row's answer: rows come as dicts of their columns, bare answers as themselves."""
    return answer["answer"] if isinstance(answer, dict) else answer


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
    questions, and at most `eval_size`, are held out for the evaluations."""
    rows = read_rows(data_path)
    model, tokenizer = load_model(model_path)
    wrapped = HFTokenizer(tokenizer, eos_ids_of(model, tokenizer))
    held_out = max(1, min(eval_size, len(rows) // 10))
    task = GSM8KTask(
        num_inputs=len(rows), max_completion_length=max_completion_length, eval_size=held_out,
        tokenizer=wrapped, prompts=[wrapped.encode_prompt(row["question"]) for row in rows],
        rows=rows,
    )  # fmt: skip
    task.prompt_length = max(len(p) for p in task.prompts)
    return task, model
