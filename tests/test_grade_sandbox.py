"""The sandbox boundary on its own: the value codec, exceptions, in-place changes, gradients."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from grader import batch_plugin
from grader.sandbox import child, launch, protocol
from grader.sandbox.proxy import SandboxUnavailable, SubmissionError, load_sandboxed

# ------------------------------------------------------------------ the codec


@pytest.mark.parametrize(
    "value",
    [
        None, True, 3, -2.5, float("inf"), "text", b"\x00\xff", [1, [2.0, "x"]], (1, 2),
        {"a": 1, 3: [None]},
        np.arange(6, dtype=np.int32).reshape(2, 3), np.float32(1.5), np.bool_(True),
        np.zeros((0, 4)), np.array(7.0),
    ],
)  # fmt: skip
def test_plain_values_cross_unchanged(value):
    got = protocol.decode(protocol.encode(value))
    assert type(got) is type(value)
    if isinstance(value, np.ndarray | np.generic):
        assert got.dtype == value.dtype and np.shape(got) == np.shape(value)
        assert np.array_equal(got, value)
    else:
        assert got == value


def test_nan_crosses_as_nan():
    assert np.isnan(protocol.decode(protocol.encode(float("nan"))))


@pytest.mark.parametrize(
    "value",
    [object(), np.array([object()]), {(1, 2): 3}, lambda: 1, np.array(["text"])],
)
def test_anything_else_is_refused(value):
    with pytest.raises(protocol.UnsupportedValue):
        protocol.encode(value)


def test_subclasses_lose_their_behaviour():
    class Liar(float):
        def __eq__(self, other):
            return True

    got = protocol.decode(protocol.encode(Liar(2.0)))
    assert type(got) is float and got != 3.0


@pytest.mark.parametrize(
    "payload",
    [
        {"__t": "ndarray", "dtype": "object", "shape": [1], "data": ""},
        {"__t": "ndarray", "dtype": "float64", "shape": [2], "data": "AAAA"},
        {"__t": "ndarray", "dtype": "float64", "shape": [-1], "data": ""},
        {"__t": "ndarray", "dtype": "float64", "shape": [10**9], "data": ""},
        {"__t": "pickle", "data": "gASVAAAAAAAAAAA="},
        {"__t": "float", "repr": "__import__('os')"},
        # Objects are rebuilt in the child only: the trusted side never builds one.
        {"__t": "module", "class": "CounterLM", "kwargs": {"__t": "dict", "items": []}},
        {"__t": "generator", "device": "cpu", "state": None},
        {"__t": "record", "fields": [["__class__", 1]]},
        {"__t": "record", "fields": [["not a name", 1]]},
    ],
)
def test_malformed_data_is_a_protocol_error(payload):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(payload)


def test_dataclasses_cross_as_plain_records():
    from dataclasses import dataclass

    @dataclass
    class Pair:
        first: list
        second: np.ndarray

        def __eq__(self, other):
            return True

    got = protocol.decode(protocol.encode(Pair([1, 2], np.arange(2))))
    assert type(got).__name__ == "SimpleNamespace"
    assert got.first == [1, 2] and got.second.tolist() == [0, 1]


def test_frames_refuse_oversized_lengths():
    with pytest.raises(protocol.ProtocolError):
        protocol.frame_length((protocol.MAX_FRAME_BYTES + 1).to_bytes(4, "big"))


# ------------------------------------------------------------------ calls through a child


def make_problem(root, runtime: str, names: list[str]):
    problem = root / "toy"
    problem.mkdir()
    (problem / "problem.toml").write_text(
        f'implement = {names!r}\nruntime = "{runtime}"\ntime_limit_s = 20\n'.replace("'", '"')
    )
    return problem


NUMPY_SOLUTION = """
import numpy as np

def scale(x, factor=2.0):
    if factor < 0:
        raise ValueError("factor must be >= 0")
    return np.asarray(x) * factor

def scale_in_place(x):
    x *= 2
    return None

class Mine(Exception):
    pass

def custom():
    raise Mine("my own exception")

def stops(x):
    raise StopIteration
"""


@pytest.fixture(scope="module")
def numpy_impl(tmp_path_factory):
    root = tmp_path_factory.mktemp("numpy")
    names = ["scale", "scale_in_place", "custom", "stops", "absent"]
    problem = make_problem(root, "pyodide", names)
    (root / "toy.py").write_text(NUMPY_SOLUTION)
    return load_sandboxed(problem, str(root / "toy.py"))


def test_a_call_returns_plain_data(numpy_impl):
    got = numpy_impl.scale(np.arange(3.0), factor=3.0)
    assert isinstance(got, np.ndarray) and got.tolist() == [0.0, 3.0, 6.0]


def test_builtin_exceptions_keep_their_type(numpy_impl):
    with pytest.raises(ValueError, match="factor must be >= 0"):
        numpy_impl.scale([1.0], factor=-1)


def test_other_exceptions_become_submission_errors(numpy_impl):
    with pytest.raises(SubmissionError, match="Mine: my own exception"):
        numpy_impl.custom()


def test_stop_iteration_does_not_end_the_tests_loop(numpy_impl):
    # Raised again as StopIteration it would end map() quietly, and all() would be True.
    with pytest.raises(SubmissionError, match="raised StopIteration"):
        all(map(numpy_impl.stops, [1, 2]))


def test_in_place_changes_reach_the_test(numpy_impl):
    x = np.ones(3)
    numpy_impl.scale_in_place(x)
    assert x.tolist() == [2.0, 2.0, 2.0]


def test_a_missing_function_says_so(numpy_impl):
    with pytest.raises(SubmissionError, match="defines no 'absent'"):
        numpy_impl.absent()


TORCH_SOLUTION = """
from dataclasses import dataclass

import torch

def weighted_loss(x, w, scale=1.0):
    return (x.exp() * w).sum() * scale

def two_outputs(x):
    return x * 2, (x ** 2).sum()

def detached(x):
    return x.detach().sum()

@dataclass
class Sampled:
    ids: torch.Tensor
    count: int

def run_model(model, ids):
    with torch.no_grad():
        return Sampled(model(ids), int(ids.numel()))

def draw(n, generator=None):
    return torch.rand(n, generator=generator)
"""


@pytest.fixture(scope="module")
def torch_impl(tmp_path_factory):
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("torch")
    names = ["weighted_loss", "two_outputs", "detached", "run_model", "draw"]
    problem = make_problem(root, "python", names)
    (root / "toy.py").write_text(TORCH_SOLUTION)
    return load_sandboxed(problem, str(root / "toy.py"))


def test_gradients_flow_back_through_the_sandbox(torch_impl):
    import torch

    x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = torch_impl.weighted_loss(x, w, scale=0.5)
    assert isinstance(loss, torch.Tensor) and loss.shape == ()
    loss.backward()
    assert torch.allclose(x.grad, 0.5 * x.detach().exp() * w.detach())
    assert torch.allclose(w.grad, 0.5 * x.detach().exp())


def test_several_outputs_and_partial_gradients(torch_impl):
    import torch

    x = torch.tensor([1.0, 2.0], requires_grad=True)
    doubled, squares = torch_impl.two_outputs(x)
    (doubled.sum() + squares).backward()
    assert torch.allclose(x.grad, 2 + 2 * x.detach())


def test_a_detached_result_does_not_pretend_to_be_differentiable(torch_impl):
    import torch

    x = torch.tensor([1.0, 2.0], requires_grad=True)
    assert not torch_impl.detached(x).requires_grad


def test_without_grad_tensors_come_back_as_tensors(torch_impl):
    import torch

    with torch.no_grad():
        got = torch_impl.weighted_loss(torch.ones(2), torch.ones(2, dtype=torch.float64))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64


def test_a_toy_model_is_rebuilt_with_its_weights(torch_impl):
    import torch

    from problems.support.toy_models import CounterLM

    model = CounterLM(vocab=5, margin=3.0)
    with torch.no_grad():
        model.table[0, 0] = -7.0  # weights changed after construction travel too
    ids = torch.tensor([[0, 1, 4]])
    got = torch_impl.run_model(model, ids)
    assert got.count == 3
    assert torch.equal(got.ids, model(ids).detach())


def test_other_modules_are_refused_with_a_reason(torch_impl):
    import torch

    with pytest.raises(SubmissionError, match="cannot be sent to the sandbox"):
        torch_impl.run_model(torch.nn.Linear(2, 2), torch.ones(1, 2))


def test_a_generator_crosses_and_comes_back_advanced(torch_impl):
    import torch

    generator, local = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(torch_impl.draw(4, generator=generator), torch.rand(4, generator=local))
    # The test's generator continues where the child's stopped, as it would locally.
    assert torch.equal(torch.rand(2, generator=generator), torch.rand(2, generator=local))


def test_the_global_generator_is_shared_with_the_child(torch_impl):
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(11)
        expected = torch.rand(4), torch.rand(2)
        torch.manual_seed(11)
        got = torch_impl.draw(4), torch.rand(2)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


# ------------------------------------------------------------------ models, optimizers, callbacks

TRAINING_SOLUTION = """
import os
import time

import torch

from grader.sandbox.protocol import write_frame

def train(model, optimizer, steps, scheduler=None):
    for _ in range(steps):
        optimizer.zero_grad()
        (model.table ** 2).sum().backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return steps

def doubled_sum(model):
    return model.table.sum() * 2

def score(reward_fn, ids, answers):
    return reward_fn(ids, answers)

def score_safely(reward_fn):
    try:
        return reward_fn(torch.ones(2), ["a", "b"])
    except ValueError as exc:
        return "caught: " + str(exc)

def keep(reward_fn):
    global KEPT
    KEPT = reward_fn

def call_kept():
    return KEPT(torch.ones(1), ["a"])

def flood(reward_fn):
    while True:
        reward_fn(torch.ones(1), ["a"])

def _protocol_out():
    for fd in range(3, 32):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:") and os.get_blocking(fd):
                import fcntl
                if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                    return fd
        except OSError:
            continue

def garbage_callback(kind):
    frames = {
        "unhashable id": {"callback": [0], "args": [], "kwargs": {}},
        "bad value": {"callback": 0, "args": [{"__t": "ndarray", "dtype": "object"}],
                      "kwargs": {}},
        "args not a list": {"callback": 0, "args": "text", "kwargs": {}},
    }
    write_frame(_protocol_out(), frames[kind])
    time.sleep(30)

def sees_reference():
    try:
        import reference.gpt  # noqa: F401
    except ImportError:
        return False
    return True
"""


def _training(root):
    pytest.importorskip("torch")
    names = ["train", "doubled_sum", "score", "score_safely", "keep", "call_kept", "flood",
             "garbage_callback", "sees_reference"]  # fmt: skip
    problem = make_problem(root, "python", names)
    (root / "toy.py").write_text(TRAINING_SOLUTION)
    return load_sandboxed(problem, str(root / "toy.py"))


@pytest.fixture(scope="module")
def training_impl(tmp_path_factory):
    return _training(tmp_path_factory.mktemp("training"))


def _toy_training(optimizer_class, steps: int, schedule=None, **options):
    """A ConstantLM with an optimizer (and LambdaLR), and a copy trained here as expected."""
    import torch

    from problems.support.toy_models import ConstantLM

    models = [ConstantLM([0.1, 0.2, 0.3, 0.4]) for _ in range(2)]
    optimizers = [optimizer_class(m.parameters(), **options) for m in models]
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, schedule) if schedule else None
                  for o in optimizers]  # fmt: skip
    model, optimizer, scheduler = models[1], optimizers[1], schedulers[1]
    for _ in range(steps):
        optimizer.zero_grad()
        (model.table**2).sum().backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return (models[0], optimizers[0], schedulers[0]), (model, optimizer, scheduler)


def test_the_childs_optimizer_steps_train_the_tests_model(training_impl):
    import torch

    (model, optimizer, _), (local, local_optimizer, _) = _toy_training(torch.optim.AdamW, 3,
                                                                      lr=0.1)  # fmt: skip
    param = model.table
    assert training_impl.train(model, optimizer, 3) == 3
    assert model.table is param, "the test's parameter keeps its identity"
    torch.testing.assert_close(model.table.detach(), local.table.detach())
    state, expected = optimizer.state[param], local_optimizer.state[local.table]
    assert int(state["step"]) == 3
    torch.testing.assert_close(state["exp_avg_sq"], expected["exp_avg_sq"])


def test_a_lambda_schedule_steps_through_the_tests_own_lambda(training_impl):
    import torch

    halves = []

    def schedule(step):
        halves.append(step)
        return 0.5**step

    (model, optimizer, scheduler), (local, _, local_scheduler) = _toy_training(
        torch.optim.SGD, 2, schedule, lr=1.0, momentum=0.9
    )
    halves.clear()
    training_impl.train(model, optimizer, 2, scheduler)
    assert halves == [1, 2], "the lambda ran here, once per step"
    assert scheduler.last_epoch == 2 and optimizer.param_groups[0]["lr"] == 0.25
    assert scheduler.get_last_lr() == local_scheduler.get_last_lr()
    torch.testing.assert_close(model.table.detach(), local.table.detach())


def test_gradients_flow_back_to_the_parameters_of_a_model(training_impl):
    import torch

    from problems.support.toy_models import ConstantLM

    model = ConstantLM([0.5, 0.25, 0.25])
    training_impl.doubled_sum(model).backward()
    torch.testing.assert_close(model.table.grad, torch.full((3,), 2.0))
    (grad,) = torch.autograd.grad(training_impl.doubled_sum(model), model.table)
    torch.testing.assert_close(grad, torch.full((3,), 2.0))


def test_the_tests_functions_run_here_on_plain_data(training_impl):
    import torch

    seen = []

    def reward(ids, answers):
        seen.append((ids, answers))
        return [float(len(a)) for a in answers]

    assert training_impl.score(reward, torch.arange(3), ["ab", "c"]) == [2.0, 1.0]
    (ids, answers), = seen  # fmt: skip
    assert isinstance(ids, torch.Tensor) and ids.tolist() == [0, 1, 2] and answers == ["ab", "c"]


def test_a_tests_function_raises_in_the_students_code(training_impl):
    def refuses(ids, answers):
        raise ValueError("wrong answers")

    assert training_impl.score_safely(refuses) == "caught: ValueError: wrong answers"


def test_a_function_of_an_earlier_call_is_no_longer_callable(training_impl):
    training_impl.keep(lambda ids, answers: [1.0])
    with pytest.raises(LookupError, match="earlier call"):
        training_impl.call_kept()


@pytest.mark.parametrize("kind", ["unhashable id", "bad value", "args not a list"])
def test_garbage_callback_frames_end_the_child_not_the_grader(tmp_path, kind):
    impl = _training(tmp_path)
    with pytest.raises(SubmissionError, match="sent malformed data"):
        impl.garbage_callback(kind)
    with pytest.raises(SubmissionError, match="sent malformed data"):  # and it stays failed
        impl.score(lambda ids, answers: 7, [1], ["a"])


def test_a_child_flooding_callbacks_is_killed_at_its_time_limit(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("GRPO_KIT_SANDBOX_LIMITS", '{"call_s": 2}')
    impl = _training(tmp_path)
    calls = []
    with pytest.raises(SubmissionError, match="timed out after 2 s"):
        impl.flood(lambda ids, answers: calls.append(1) or [0.0])
    assert len(calls) > 10, "the test's function was answered until the clock ran out"


def _bad_updates(torch) -> dict[str, tuple[list, list]]:
    """What a tampered child might send back for a model (0), AdamW (1) and LambdaLR (2)."""
    two = torch.zeros(4)
    state = {"step": torch.tensor(1.0), "exp_avg": two, "exp_avg_sq": two}
    return {
        "parameter of another shape": ([[0, torch.zeros(3)]], []),
        "parameter of another dtype": ([[0, two.double()]], []),
        "negative index": ([[-1, two]], []),
        "state of another shape": ([], [[1, {"state": [[0, state | {"exp_avg": torch.zeros(5)}]],
                                              "groups": [{}]}]]),  # fmt: skip
        "unknown state key": ([], [[1, {"state": [[0, state | {"evil": two}]], "groups": [{}]}]]),
        "a model that changed": ([], [[0, {"state": [], "groups": [{}]}]]),
        "scheduler counter of another type": ([], [[2, {"last_epoch": "1", "_step_count": 1,
                                                       "_is_initial": False, "_last_lr": [0.1]}]]),
    }  # fmt: skip


@pytest.mark.parametrize("case", ["parameter of another shape", "parameter of another dtype",
                                  "negative index", "state of another shape", "unknown state key",
                                  "a model that changed", "scheduler counter of another type"])  # fmt: skip
def test_changes_sent_back_are_checked_before_they_reach_the_tests_objects(case):
    torch = pytest.importorskip("torch")
    import itertools

    from grader.sandbox.objects import CallObjects
    from problems.support.toy_models import ConstantLM

    model = ConstantLM([0.25] * 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    table = CallObjects(itertools.count().__next__)
    protocol.encode([model, optimizer, scheduler], table=table)
    table.encode_table()
    params, states = _bad_updates(torch)[case]
    with pytest.raises(ValueError):
        table.apply([[i, protocol.encode(v)] for i, v in params],
                    [[i, protocol.encode(v)] for i, v in states])  # fmt: skip
    assert torch.equal(model.table.detach(), torch.log(torch.full((4,), 0.25)))
    assert not optimizer.state and scheduler.last_epoch == 0


def test_kit_records_come_back_as_their_class_and_others_as_fields():
    pytest.importorskip("torch")
    from reference.grpo_config import GRPOConfig

    got = protocol.decode(protocol.encode(GRPOConfig(beta=0.5)))
    assert type(got) is GRPOConfig and got.beta == 0.5
    with pytest.raises(protocol.ProtocolError, match="not a valid GRPOConfig"):
        protocol.decode(protocol.encode(GRPOConfig()) | {"fields": [["beta", -1.0]]})
    with pytest.raises(protocol.ProtocolError, match="no fields"):
        protocol.decode({"__t": "record", "class": "GRPOConfig", "fields": [["evil", 1]]})
    with pytest.raises(protocol.ProtocolError, match="not a record class"):
        protocol.decode({"__t": "record", "class": "Popen", "fields": []})


@pytest.mark.skipif(launch.bwrap_command() is None, reason="needs bubblewrap")
def test_only_the_capstones_child_sees_reference_modules(training_impl):
    assert training_impl.sees_reference() is False


CAPSTONE_PROBE = """
import importlib
import os

def probe(kit):
    seen = sorted(os.listdir(os.path.join(kit, "reference")))
    tests = os.path.exists(os.path.join(kit, "problems", "grpo_trainer"))
    try:
        importlib.import_module("reference.grpo_trainer")
    except ImportError:
        return seen, tests, False
    return seen, tests, True
"""


@pytest.mark.skipif(launch.bwrap_command() is None, reason="needs bubblewrap")
def test_the_capstones_child_sees_what_it_builds_on_not_its_answer(tmp_path):
    from grader import kit_types
    from grader.problems import KIT_ROOT

    problem = tmp_path / "grpo_trainer"  # the child is chosen by the problem's name
    problem.mkdir()
    (problem / "problem.toml").write_text('implement = ["probe"]\nruntime = "python"\n')
    (tmp_path / "grpo_trainer.py").write_text(CAPSTONE_PROBE)
    impl = load_sandboxed(problem, str(tmp_path / "grpo_trainer.py"))
    seen, tests, answer = impl.probe(str(KIT_ROOT))
    assert seen == sorted(f"{name}.py" for name in kit_types.SANDBOX_REFERENCE["grpo_trainer"])
    assert "grpo_trainer.py" not in seen and not tests and not answer


# ------------------------------------------------------------------ the grader's own failures


@pytest.mark.parametrize("how", ["start-up timeout", "no interpreter"])
def test_a_sandbox_that_does_not_start_is_the_graders_failure(tmp_path, monkeypatch, how):
    problem = make_problem(tmp_path, "pyodide", ["scale"])
    (tmp_path / "toy.py").write_text(NUMPY_SOLUTION)
    if how == "start-up timeout":
        monkeypatch.setattr(launch, "STARTUP_GRACE_S", 0.0)
    else:
        monkeypatch.setattr(launch.sys, "executable", str(tmp_path / "no-such-python"))
    impl = load_sandboxed(problem, str(tmp_path / "toy.py"))
    for _ in range(2):  # and it stays so for the problem's later calls
        with pytest.raises(SandboxUnavailable, match="could not be graded: the sandbox"):
            impl.scale([1.0])


def test_the_trusted_side_reseeds_global_generators_before_each_test():
    torch = pytest.importorskip("torch")
    state = np.random.get_state()
    try:
        with torch.random.fork_rng():
            draws = []
            for seed in (1, 2):  # what the previous student's call left behind
                torch.manual_seed(seed)
                np.random.seed(seed)
                batch_plugin.pytest_runtest_setup(type("Item", (), {"nodeid": "x"}))
                draws.append((torch.rand(3), np.random.rand(3)))
            assert torch.equal(draws[0][0], draws[1][0])
            assert np.array_equal(draws[0][1], draws[1][1])
    finally:
        np.random.set_state(state)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_process_limit_counts_what_the_kernel_counts():
    # Under a setuid bwrap (same user namespace) the kernel counts the uid's processes outside
    # the child's PID namespace too: the count the trusted side took there must be used.
    userns = os.stat("/proc/self/ns/user").st_ino
    assert child._processes_already_counted({"userns": userns, "processes": 10_000}) == 10_000
    # In a user namespace of its own the kernel counts only those the child can see.
    own = child._processes_already_counted(None)
    assert 1 <= own < 10_000
    assert child._processes_already_counted({"userns": userns + 1, "processes": 10_000}) == own
