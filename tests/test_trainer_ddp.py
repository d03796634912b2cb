"""Data parallelism: 2 processes (gloo, CPU) update exactly as 1 process on the same global batch.

Each process samples its own completions, so the single process replays the rollouts the two
processes generated: what is compared is the update, where the normalizer and the gradient
averaging across processes could go wrong. Each step takes another loss type, and the processes
split their share into micro-batches (DDP's no_sync path) while the single process does not.
"""

import json

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from reference.gpt import GPT, GPTConfig
from reference.grpo_config import GRPOConfig, Rollout
from reference.grpo_trainer import generate_rollout, optimize
from reference.tasks import ReverseDigits
from reference.trainer import Trainer, task_reward, text_reward

TASK = ReverseDigits()
WORLD = 2
LOSS_TYPES = ("dapo", "grpo", "dr_grpo")  # one per step
STEPS = len(LOSS_TYPES)

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built")


def config(**overrides) -> GRPOConfig:
    base = dict(max_completion_length=5, num_generations=4, loss_type="dapo", beta=0.0,
                num_iterations=2, learning_rate=1e-2)  # fmt: skip
    return GRPOConfig(**{**base, **overrides})


def policy() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=TASK.tokenizer.vocab_size, block_size=10))


def _worker(rank: int, store_dir: str) -> None:
    # SGD, not Adam: Adam would hide a gradient off by a constant factor, and would blow up
    # the rounding noise of parameters whose gradient is 0 (the key biases) into full steps.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_dir}/store", rank=rank,
                            world_size=WORLD)  # fmt: skip
    try:
        model = torch.nn.parallel.DistributedDataParallel(policy())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        reward = text_reward(TASK.tokenizer.decode_batch, [task_reward(TASK)])
        sampler = torch.Generator().manual_seed(100 + rank)
        for step in range(STEPS):
            # Different token counts per process: the token normalizer must be global.
            prompt_ids, answers = TASK.sample(3, torch.Generator().manual_seed(10 * step + rank))
            step_config = config(loss_type=LOSS_TYPES[step], gradient_accumulation_steps=3)
            rollout = generate_rollout(model, None, prompt_ids, answers, reward,
                                       TASK.tokenizer.eos_id, step_config, sampler)  # fmt: skip
            torch.save(rollout, f"{store_dir}/rollout_{step}_{rank}.pt")
            optimize(model, optimizer, rollout, step_config)
        if rank == 0:
            torch.save(model.module.state_dict(), f"{store_dir}/ddp.pt")

        # The full trainer under DDP, as torchrun would run it: the processes stay in sync.
        trainer = Trainer(GRPOConfig(max_steps=2, prompts_per_step=8, num_generations=4,
                                     output_dir=f"{store_dir}/run", save_steps=0),
                          TASK, device="cpu", show_progress=False)  # fmt: skip
        trainer.train()
        torch.save(trainer.policy.state_dict(), f"{store_dir}/trainer_{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    store = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(str(store),), nprocs=WORLD, join=True)
    return store


def test_two_processes_update_like_one_process_with_the_global_batch(ddp_run):
    single = policy()
    optimizer = torch.optim.SGD(single.parameters(), lr=0.5)
    for step in range(STEPS):
        parts = [
            torch.load(ddp_run / f"rollout_{step}_{r}.pt", weights_only=False) for r in range(WORLD)
        ]
        optimize(single, optimizer, Rollout.cat(parts), config(loss_type=LOSS_TYPES[step]))
    ddp = torch.load(ddp_run / "ddp.pt")
    for name, value in single.state_dict().items():
        torch.testing.assert_close(ddp[name], value, atol=1e-5, rtol=1e-4, msg=name)


def test_trainer_keeps_the_processes_in_sync_and_logs_once(ddp_run):
    states = [torch.load(ddp_run / f"trainer_{r}.pt") for r in range(WORLD)]
    for name, value in states[0].items():
        assert torch.equal(states[1][name], value), name
    rows = [
        json.loads(line) for line in (ddp_run / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [row["step"] for row in rows] == [1, 2]
    # The metrics cover the global batch: 8 prompts x 4 completions of at most 5 tokens.
    assert 0 < rows[0]["completions/mean_length"] <= 5
