"""The GSM8K-style pipeline end to end, offline: a tiny random transformers model and tokenizer
built here, saved to a folder, loaded back the way a user's model is, and trained a few steps."""

import json
import random

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the GSM8K pipeline needs transformers: pip install -e '.[hf]'"
)
pytest.importorskip("datasets", reason="the GSM8K pipeline reads data with datasets: '.[hf]'")

from reference.grpo_config import GRPOConfig  # noqa: E402
from reference.grpo_trainer import completion_logps, generate_rollout  # noqa: E402
from reference.gsm8k import (  # noqa: E402
    INSTRUCTION,
    PLAIN_TEMPLATE,
    REWARD_FUNCS,
    final_answer,
    load_gsm8k,
    read_rows,
)
from reference.trainer import Trainer  # noqa: E402

TAGS = ["<think>", "</think>", "<answer>", "</answer>"]
SPECIAL = ["<pad>", "<eos>", "<unk>"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def questions(n: int) -> list[dict]:
    """Additions worded at different lengths, half with GSM8K's "#### answer" form."""
    rng = random.Random(0)
    rows = []
    for i in range(n):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        question = f"Tom has {a} apples and buys {b} more ." + " He is happy ." * (i % 3)
        answer = f"{a} plus {b} is {a + b} .\n#### {a + b}" if i % 2 else a + b
        rows.append({"question": question, "answer": answer})
    return rows


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A model folder (tiny random Llama + word-level tokenizer) and a JSONL of 12 questions."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = tmp_path_factory.mktemp("gsm8k")
    rows = questions(12)
    data = folder / "train.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

    texts = [PLAIN_TEMPLATE.format(instruction=INSTRUCTION, question=r["question"]) for r in rows]
    words = {w for text in texts for w in text.split()} | {str(i) for i in range(20)}
    vocab = {w: i for i, w in enumerate(SPECIAL + TAGS + sorted(words - set(TAGS)))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        pad_token_id=0, bos_token_id=None, eos_token_id=1,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    warm_up(model, tokenizer, texts, rows)
    model_dir = folder / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return model_dir, data


def warm_up(model, tokenizer, prompts: list[str], rows: list[dict], steps: int = 25) -> None:
    """A little supervised training on the template, as GRPO starts from a model that follows
    it sometimes: a random model never does, so every reward would be 0 and nothing would learn."""
    sequences = []
    for prompt, row in zip(prompts, rows, strict=True):
        answer = final_answer(row["answer"])
        completion = f"<think> {answer} </think> <answer> {answer} </answer>"
        sequences.append(tokenizer(f"{prompt} {completion}")["input_ids"] + [1])
    width = max(len(ids) for ids in sequences)
    ids = torch.tensor([row + [0] * (width - len(row)) for row in sequences])  # right-padded
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in sequences])
    labels = ids.masked_fill(mask == 0, -100)  # no loss on padding
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        model(ids, attention_mask=mask, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def small_config(tmp_path, **overrides) -> GRPOConfig:
    base = dict(max_steps=3, prompts_per_step=4, num_generations=4, max_completion_length=8,
                learning_rate=1e-2, num_iterations=2, beta=0.04, output_dir=str(tmp_path),
                save_steps=0, eval_size=2)  # fmt: skip
    return GRPOConfig(**{**base, **overrides})


def test_a_few_training_steps_run_end_to_end_and_change_the_model(files, tmp_path, trl_metrics):
    task, policy = load_gsm8k(*files, max_completion_length=8)
    before = [p.detach().clone() for p in policy.parameters()]
    trainer = Trainer(small_config(tmp_path), task, policy=policy, reward_funcs=REWARD_FUNCS,
                      device="cpu", show_progress=False)  # fmt: skip
    trainer.train()
    rows = [json.loads(line) for line in trainer.metrics_path.read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]
    for name in trl_metrics:
        assert all(name in row for row in rows), f"metric {name!r} missing"
    assert all(0.0 <= row["reward"] <= 2.0 for row in rows)
    assert any(row["reward"] > 0 for row in rows)  # some completions followed the template
    assert rows[-1]["kl"] > 0  # the policy moved away from its frozen reference
    after = list(trainer.policy.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    results = trainer.evaluate()
    assert set(results) == {"before", "after"}
    assert all(0.0 <= r["exact_match"] <= 1.0 for r in results.values())


def test_rewards_are_format_plus_correctness_of_the_decoded_completions(files, tmp_path):
    task, policy = load_gsm8k(*files, max_completion_length=8)
    config = small_config(tmp_path, reward_weights=[0.5, 2.0])
    trainer = Trainer(config, task, policy=policy, reward_funcs=REWARD_FUNCS, device="cpu",
                      show_progress=False)  # fmt: skip
    tok = task.tokenizer.tokenizer
    texts = ["<think> 3 and 4 </think> <answer> 7 </answer>",  # well formed, right
             "<think> 3 and 4 </think> <answer> 8 </answer>",  # well formed, wrong
             "<answer> 7 </answer>",  # right answer, no think block
             "7"]  # fmt: skip
    ids = [tok(text)["input_ids"] + [1] for text in texts]  # then EOS, then padding
    width = max(len(row) for row in ids)
    ids = torch.tensor([row + [0] * (width - len(row)) for row in ids])
    rewards = trainer.reward_fn(ids, ["7"] * 4)
    torch.testing.assert_close(rewards, torch.tensor([0.5 + 2.0, 0.5, 0.25 + 2.0, 0.0]))


def test_rollout_rewards_are_computed_from_the_sampled_completions(files, tmp_path):
    task, policy = load_gsm8k(*files, max_completion_length=8)
    config = small_config(tmp_path)
    trainer_reward = Trainer(config, task, policy=policy, reward_funcs=REWARD_FUNCS,
                             device="cpu").reward_fn  # fmt: skip
    prompt_ids, answers = task.batch([0, 1, 2])  # three prompt lengths
    rollout = generate_rollout(policy, None, prompt_ids, answers, trainer_reward,
                               task.tokenizer.eos_id, config, torch.Generator().manual_seed(0),
                               prompt_mask=task.prompt_mask(prompt_ids))  # fmt: skip
    completions = task.tokenizer.decode_batch(rollout.completion_ids)
    expected = task.reward(completions, [a for a in answers for _ in range(4)])
    torch.testing.assert_close(rollout.rewards, torch.tensor(expected))


def test_padded_prompts_get_the_log_probs_they_would_get_alone(files):
    task, policy = load_gsm8k(*files, max_completion_length=8)
    prompt_ids, _ = task.batch([0, 1, 2])
    mask = task.prompt_mask(prompt_ids)
    assert mask.sum(1).tolist() == [len(task.prompts[n]) for n in (0, 1, 2)]
    assert len(set(mask.sum(1).tolist())) == 3  # the batch really is padded
    completion = torch.randint(3, 20, (3, 5), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([prompt_ids, completion], dim=1)
    attention = torch.cat([mask, torch.ones_like(completion)], dim=1)
    config = GRPOConfig(max_completion_length=5)
    padded = completion_logps(policy, ids, prompt_ids.shape[1], config, attention)
    for row, n in enumerate((0, 1, 2)):
        alone = torch.cat([torch.tensor(task.prompts[n]), completion[row]])[None]
        single = completion_logps(policy, alone, len(task.prompts[n]), config)
        torch.testing.assert_close(padded[row : row + 1], single, atol=1e-5, rtol=1e-5)


def test_gsm8k_answers_and_data_errors(tmp_path):
    assert final_answer("Half of 4 is 2.\n#### 1,234") == "1,234"
    assert final_answer(42) == "42"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "4"}\n{"question": "q"}\n')
    with pytest.raises(ValueError, match="row 2"):
        read_rows(bad)
    bad.write_text('{"question": "q", "answer": "4"}\n{"question": "q", "answer": "#### many"}\n')
    with pytest.raises(ValueError, match="row 2.*does not end in a number"):
        read_rows(bad)
    bad.write_text('{"question": "q", "answer": "4"}\n{"question": \n')
    with pytest.raises(ValueError, match="could not be read as json"):
        read_rows(bad)
    with pytest.raises(FileNotFoundError, match="JSONL"):
        read_rows(tmp_path / "missing.jsonl")
    (tmp_path / "data.xml").write_text("<questions/>")
    with pytest.raises(ValueError, match="unknown data format"):
        read_rows(tmp_path / "data.xml")


def test_cli_trains_gsm8k_and_saves_the_model(files, tmp_path, capsys):
    from grader.cli import main

    model_dir, data = files
    out = tmp_path / "run"
    code = main(["train", "--task", "gsm8k", "--model", str(model_dir), "--data", str(data),
                 "--output-dir", str(out), "--max-steps", "2", "--prompts-per-step", "2",
                 "--num-generations", "2", "--max-completion-length", "6", "--device", "cpu"])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "Greedy decoding" in printed
    assert (out / "model" / "config.json").is_file() and (out / "training.png").is_file()
    assert main(["train", "--task", "gsm8k", "--data", str(data)]) == 2
    assert "needs --model" in capsys.readouterr().err


def test_cli_trains_lora_adapters_with_gradient_checkpointing(files, tmp_path, capsys):
    pytest.importorskip("peft", reason="LoRA needs peft: pip install -e '.[lora]'")
    from grader.cli import main

    model_dir, data = files
    out = tmp_path / "lora"
    code = main(["train", "--task", "gsm8k", "--model", str(model_dir), "--data", str(data),
                 "--output-dir", str(out), "--max-steps", "2", "--prompts-per-step", "2",
                 "--num-generations", "2", "--max-completion-length", "6", "--device", "cpu",
                 "--use-peft", "--lora-r", "4", "--gradient-checkpointing", "--eval-size", "2",
                 "--beta", "0.04"])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "trained) on cpu" in printed and "LoRA adapter" in printed
    assert (out / "model" / "adapter_config.json").is_file()
