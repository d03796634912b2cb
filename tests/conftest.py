"""Fixtures shared by the kit's own tests."""

import pytest

from grader import site
from grader.problems import all_problems

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


@pytest.fixture(scope="session")
def browser_kit(tmp_path_factory):
    """A copy of the kit laid out as the page's worker lays it out in Pyodide's file system.

    One folder for the whole session, as the browser keeps one (/kit) for all its runs: the
    runs import its `problems` package, which another folder's would shadow.
    """
    first = next(p for p in all_problems() if p.runs_in_browser)
    root = tmp_path_factory.mktemp("kit")
    for relative, text in site.kit_files(first).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")
    return root
