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

    from grader.toy_models import CounterLM

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
