"""Fixtures shared by the kit's own tests."""

import pytest

# The metric names the trainer logs every step, as TRL's GRPOTrainer names them.
TRL_METRICS = ("reward", "reward_std", "frac_reward_zero_std", "kl", "entropy", "clip_ratio",
               "completions/mean_length", "completions/clipped_ratio", "num_tokens", "step_time")  # fmt: skip


@pytest.fixture
def one_torch_thread():
    """Tiny matrices: a second thread only competes for the CI machine's two cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def trl_metrics() -> tuple[str, ...]:
    return TRL_METRICS
