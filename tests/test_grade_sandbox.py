"""The boundary between the tests and a solution: the value codec, and one execution path.

A solution gets the same verdict in this process (a local run) and in a sandboxed process
(batch grading): both are checked here on the same toy problem, side by side. Then what only
the sandbox must withstand: floods, forged frames, tiny replies that would allocate gigabytes,
crashes, leftover processes, students who try to reach each other.
"""

from __future__ import annotations

import dataclasses
import fractions
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from grader import values
from grader.errors import GraderError, SubmissionError
from grader.execution import reseed
from grader.loader import Limits, Runner, load_implementation, next_test
from grader.sandbox import bwrap, cgroup, forkserver, frames, limits
from grader.sandbox.submission import LIMITS_ENV

SANDBOXED = bwrap.bwrap_command() is not None
needs_bwrap = pytest.mark.skipif(not SANDBOXED, reason="needs a working bubblewrap")

# ------------------------------------------------------------------ the codec


@pytest.mark.parametrize(
    "value",
    [
        None, True, 3, -2.5, float("inf"), "text", b"\x00\xff", [1, [2.0, "x"]], (1, 2),
        {"a": 1, 3: [None]},
        np.arange(6, dtype=np.int32).reshape(2, 3), np.float32(1.5), np.float64(2.5),
        np.int64(7), np.bool_(True), np.zeros((0, 4)), np.array(7.0),
        Fraction(-3, 4), Decimal("42.10"), Decimal("NaN"), np.str_("<answer>1</answer>"),
    ],
)  # fmt: skip
def test_plain_values_cross_with_their_exact_type(value):
    got = values.copy(value)
    assert type(got) is type(value)  # a numpy float64 stays one: it is not a Python float
    if isinstance(value, np.ndarray | np.generic) and not isinstance(value, str):
        assert got.dtype == value.dtype and np.shape(got) == np.shape(value)
        assert np.array_equal(got, value)
    else:
        assert got == value or (isinstance(value, Decimal) and str(got) == str(value))


def test_tensors_cross_with_dtype_and_requires_grad():
    torch = pytest.importorskip("torch")
    x = torch.linspace(-3, 3, 7, dtype=torch.bfloat16)
    got = values.copy(x)
    assert got.dtype == torch.bfloat16 and torch.equal(got, x) and not got.requires_grad
    y = values.copy(torch.ones(2, 3, dtype=torch.float64).requires_grad_())
    assert y.dtype == torch.float64 and y.requires_grad and y.grad_fn is None


def test_nan_crosses_as_nan():
    assert np.isnan(values.copy(float("nan")))


@pytest.mark.parametrize(
    "value",
    [
        object(),
        np.array([object()]),
        {(1, 2): 3},
        lambda: 1,
        np.array(["text"]),
        iter([1]),
        {2**63: 1},
    ],
)
def test_anything_else_is_refused(value):
    with pytest.raises(values.UnsupportedValue):
        values.encode(value)


def test_subclasses_lose_their_behaviour():
    class Liar(float):
        def __eq__(self, other):
            return True

    class Sneaky(list):
        def __iter__(self):
            return iter([42])

    got = values.copy([Liar(2.0), Sneaky([1, 2])])
    assert type(got[0]) is float and got[0] != 3.0
    assert type(got[1]) is list and got[1] == [1, 2]


@pytest.mark.parametrize(
    "payload",
    [
        {"__t": "ndarray", "dtype": "object", "shape": [1], "data": ""},
        {"__t": "ndarray", "dtype": ["float64"], "shape": [], "data": "AAAAAAAAAAA="},
        {"__t": "npscalar", "dtype": {}, "shape": [], "data": ""},
        {"__t": "ndarray", "dtype": "float64", "shape": [2], "data": "AAAA"},
        {"__t": "ndarray", "dtype": "float64", "shape": [-1], "data": ""},
        {"__t": "ndarray", "dtype": "float64", "shape": [10**9], "data": ""},
        # No element at all, but a test reducing over the first axis would allocate 2**28.
        {"__t": "ndarray", "dtype": "float64", "shape": [2**28, 0], "data": ""},
        {"__t": "ndarray", "dtype": "float64", "shape": [1] * 9, "data": "AAAAAAAAAAA="},
        {"__t": "ndarray", "dtype": "float64", "shape": [True], "data": "AAAAAAAAAAA="},
        {"__t": "tensor", "torch_dtype": "float32", "dtype": "float64", "shape": [], "data": ""},
        {"__t": "pickle", "data": "gASVAAAAAAAAAAA="},
        {"__t": "float", "repr": "__import__('os')"},
        {"__t": "generator", "device": "cpu", "state": None},
        {"__t": "record", "fields": [["__class__", 1]]},
        {"__t": "record", "fields": [["not a name", 1]]},
        {"__t": "dict", "items": [[[1], 2]]},
        # Keys past 64 bits could all hash alike: building their dict would take N**2 steps.
        {"__t": "dict", "items": [[k * (2**61 - 1), 0] for k in (1, 2**3, 2**40)]},
        {"__t": "fraction", "num": 1, "den": 0},
        {"__t": "fraction", "num": "1", "den": 2},
        {"__t": "decimal", "repr": "__import__('os')"},
        {"__t": "decimal", "repr": "1" * 10_000},
        {"__t": "npstr", "text": 42},
        {"__t": "npstr", "text": "x" * 1_000_001},
    ],
)
def test_malformed_data_is_a_protocol_error(payload):
    with pytest.raises(values.ProtocolError):
        values.decode(payload)


def test_parsing_a_reply_counts_against_its_deadline(monkeypatch):
    read_end, write_end = os.pipe()
    try:
        frames.write(write_end, {"id": 1})
        reader = frames.Reader(read_end, None, keep=0)
        parse = frames.parse
        monkeypatch.setattr(frames, "parse", lambda body: time.sleep(0.3) or parse(body))
        with pytest.raises(frames.Late):  # arrived in time, parsed too late
            reader.read(time.monotonic() + 0.1)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_int_dict_keys_of_64_bits_cross():
    keys = {-(2**63): 0, 2**63 - 1: 1, 2**61 - 1: 2, 0: 3}
    assert values.copy(keys) == keys


def test_a_budget_caps_one_value_and_all_values_together():
    whole = values.Budget(10)
    values.decode(values.encode(np.zeros(6)), values.Budget(8, parent=whole))
    with pytest.raises(values.ProtocolError):
        values.decode(values.encode(np.zeros(6)), values.Budget(8, parent=whole))
    with pytest.raises(values.ProtocolError):
        values.decode(values.encode(np.zeros(9)), values.Budget(8))


def test_ints_beyond_what_json_text_carries_are_refused_alike_everywhere():
    # The sandbox's JSON cannot read an int of more than 4,300 digits; a local run, which
    # skips the text, refuses the same ints, so both give one verdict.
    assert values.copy(2**values.MAX_INT_BITS - 1) == 2**values.MAX_INT_BITS - 1
    for huge in (10**5000, -(10**5000), fractions.Fraction(1, 10**5000)):
        with pytest.raises(values.UnsupportedValue):
            values.encode(huge)
    with pytest.raises(values.ProtocolError):
        values.decode(10**5000)
    with pytest.raises(values.ProtocolError):
        values.decode({"__t": "fraction", "num": 1, "den": 10**5000})


def test_arguments_may_be_larger_than_a_returned_value():
    # The tests' own arguments (millions of positions to time a loop) reach the solution;
    # what comes back stays within the smaller limit.
    big = np.zeros((1, values.MAX_ELEMENTS + 1), dtype=np.uint8)
    assert (
        values.decode(values.encode(big), values.Budget(values.MAX_REQUEST_ELEMENTS)).shape
        == big.shape
    )
    with pytest.raises(values.ProtocolError):
        values.decode(values.encode(big))


def test_dataclasses_cross_as_plain_records():
    @dataclasses.dataclass
    class Pair:
        first: list
        second: np.ndarray

        def __eq__(self, other):
            return True

    got = values.copy(Pair([1, 2], np.arange(2)))
    assert type(got).__name__ == "SimpleNamespace"
    assert got.first == [1, 2] and got.second.tolist() == [0, 1]


# ------------------------------------------------------------------ one toy problem, two places


def make_problem(root: Path, solution: str, *, runtime: str = "pyodide", probes: str = "",
                 time_limit: float = 5, names=("scale",)) -> Path:  # fmt: skip
    """A throwaway problem `toy` with `solution` as the file a student hands in."""
    problem = root / "problems" / "toy"
    problem.mkdir(parents=True)
    (problem / "problem.toml").write_text(textwrap.dedent(f"""\
        title = "Toy"
        order = 1
        difficulty = "easy"
        tags = ["toy"]
        implement = {list(names)!r}
        runtime = "{runtime}"
        points_per_test = 1
        time_limit_s = {time_limit}
        teaches = "Nothing."
        """).replace("'", '"'))  # fmt: skip
    (problem / "README.md").write_text("# Toy\n")
    (problem / "toy.py").write_text("def scale(x):\n    raise NotImplementedError\n")
    (problem / "test_toy.py").write_text("def test_nothing(impl):\n    pass\n")
    if probes:
        (problem / "probes.py").write_text(textwrap.dedent(probes))
    (root / "toy.py").write_text(textwrap.dedent(solution))
    return problem


TOY = """
import warnings

import numpy as np

LIMIT = 3
warnings.simplefilter("error")  # ends with the import, locally as in the sandbox

def scale(x, factor=2.0):
    if factor < 0:
        raise ValueError("factor must be >= 0")
    return np.asarray(x) * factor

def scale_in_place(x):
    x *= 2
    return np.float64(x.sum())

class Mine(Exception):
    pass

class Picky(ValueError):
    pass

def custom(kind):
    raise (Mine if kind == "mine" else Picky)("my own exception")

def stops(x):
    raise StopIteration

def draw():
    return float(np.random.random())

def weird():
    return object()

def slow(seconds):
    import time
    time.sleep(seconds)
    return seconds

def own_source():
    import inspect  # as TorchScript does: torch.jit.script reads the function's source
    return inspect.getsource(scale).splitlines()[0]

def own_file():
    with open(__file__, encoding="utf-8") as file:
        return file.read().splitlines()[1]

def warns(strict):
    if strict:
        warnings.simplefilter("error")  # lasts until the test ends, locally as in the sandbox
    return float(np.float64(0.0) / np.float64(0.0) == 0.0)

def not_a_function():
    pass

not_a_function = 3
"""
TOY_NAMES = ("scale", "scale_in_place", "custom", "stops", "draw", "weird", "slow", "own_source",
             "own_file", "warns", "not_a_function", "absent")  # fmt: skip
TOY_PROBES = """
import numpy as np

def scaled_twice(solution, x):
    once = solution.scale(x)
    return {"once": once, "twice": solution.scale(once)}
"""


@pytest.fixture(scope="module", params=["local", "sandbox"])
def toy(request, tmp_path_factory):
    """The same toy solution, run in this process and in a sandboxed one."""
    root = tmp_path_factory.mktemp(request.param)
    problem = make_problem(root, TOY, probes=TOY_PROBES, time_limit=2, names=TOY_NAMES)
    spec = str(root / "toy.py") if request.param == "local" else f"sandbox:{root / 'toy.py'}"
    impl = load_implementation(problem, spec)
    yield impl
    impl.close()


def test_a_call_returns_plain_data(toy):
    got = toy.scale(np.arange(3.0), factor=3.0)
    assert isinstance(got, np.ndarray) and got.tolist() == [0.0, 3.0, 6.0]


def test_a_solution_reads_its_own_source_wherever_it_runs(toy):
    # The sandbox runs the text of a file that is not on its disk: its lines must still be found.
    assert toy.own_source().startswith("def scale(")


def test_a_solution_reads_its_own_file_wherever_it_runs(toy):
    # Its __file__ named a file the sandbox never wrote: 29/29 in check, 0 in grade.
    assert toy.own_file() == "import warnings"


def test_warning_filters_a_solution_sets_end_with_its_import_or_its_test(toy):
    # simplefilter("error") at import lasted every call in the sandbox alone: a numpy
    # RuntimeWarning became an exception there (29 of 29 in check, 18.9 in grade).
    assert toy.warns(False) == 0.0


def test_a_warning_filter_set_in_a_call_holds_for_the_rest_of_its_test(toy):
    with pytest.raises(RuntimeWarning):
        toy.warns(True)
    with pytest.raises(RuntimeWarning):
        toy.warns(False)


def test_builtin_exceptions_keep_their_type_and_message(toy):
    with pytest.raises(ValueError, match="factor must be >= 0"):
        toy.scale([1.0], factor=-1)
    with pytest.raises(ValueError, match="Picky: my own exception"):
        toy.custom("picky")


def test_other_exceptions_become_submission_errors(toy):
    with pytest.raises(SubmissionError, match="Mine: my own exception"):
        toy.custom("mine")


def test_stop_iteration_cannot_end_the_tests_loop(toy):
    # Raised again as StopIteration it would end map() quietly, and all() would be True.
    with pytest.raises(SubmissionError, match="raised StopIteration"):
        all(map(toy.stops, [1, 2]))


def test_the_solution_works_on_copies_and_observe_shows_its_changes(toy):
    x = np.ones(3)
    seen = toy.scale_in_place.observe(x)
    assert x.tolist() == [1.0, 1.0, 1.0], "the test's own array must never change"
    assert seen.args[0].tolist() == [2.0, 2.0, 2.0] and seen.error is None
    assert type(seen.value) is np.float64 and seen.value == 6.0


def test_a_call_that_changes_its_inputs_fails_every_test_that_makes_it(toy):
    # Every statement promises untouched inputs: any plain call checks it, not only observe.
    with pytest.raises(SubmissionError, match="changed its input argument 1 in place"):
        toy.scale_in_place(np.ones(3))
    with pytest.raises(SubmissionError, match="changed its input 'x' in place"):
        toy.scale_in_place(x=[np.ones(2), 1])  # the list grows in place, then sum() fails
    with pytest.raises(SubmissionError, match="changed its input 'x' in place"):
        list(toy.scale_in_place.each([{"x": np.zeros(2)}, {"x": np.ones(2)}]))
    assert toy.scale_in_place(np.zeros(3)) == 0.0  # 0 * 2 changes nothing


def test_observe_keeps_the_exception_instead_of_raising(toy):
    seen = toy.scale.observe([1.0], factor=-1)
    assert isinstance(seen.error, ValueError) and seen.value is None


def test_a_missing_or_non_function_name_says_so(toy):
    with pytest.raises(SubmissionError, match="defines no 'absent'"):
        toy.absent()
    with pytest.raises(SubmissionError, match="not as a function"):
        toy.not_a_function()


def test_a_result_that_is_not_plain_data_is_refused(toy):
    with pytest.raises(SubmissionError, match="weird returned a value of type object"):
        toy.weird()


def test_probes_run_beside_the_solution(toy):
    got = toy.probe.scaled_twice([1.0, 2.0])
    assert got["twice"].tolist() == [4.0, 8.0]


def test_global_random_state_is_the_same_at_the_start_of_every_test(toy):
    next_test()
    reseed()
    first = toy.draw()
    np.random.random()  # the test's own draws do not move the solution's generator
    next_test()
    reseed()
    assert toy.draw() == first


def test_each_makes_many_calls_in_one_request(toy):
    x = np.ones(2)
    got = list(toy.scale.each([{"x": x}, {"x": x, "factor": 3.0}, {"x": [5.0]}], factor=0.5))
    assert [g.tolist() for g in got] == [[0.5, 0.5], [3.0, 3.0], [2.5]]
    assert list(toy.scale.each([])) == []


def test_each_raises_the_first_exception_where_its_value_would_come(toy):
    values_seen = []
    with pytest.raises(ValueError, match="factor must be >= 0"):
        for got in toy.scale.each([{"factor": 1.0}, {"factor": -1.0}, {"factor": 2.0}], x=[1.0]):
            values_seen.append(got.tolist())
    assert values_seen == [[1.0]], "the value before the exception comes first"
    with pytest.raises(SubmissionError, match="Mine: my own exception"):
        list(toy.custom.each([{"kind": "mine"}]))


@pytest.mark.parametrize("place", ["local", "sandbox"])
def test_each_has_the_time_limit_of_its_calls_together(tmp_path, place):
    problem = make_problem(tmp_path, TOY, time_limit=1, names=TOY_NAMES)
    spec = str(tmp_path / "toy.py")
    impl = load_implementation(problem, spec if place == "local" else f"sandbox:{spec}")
    started = time.monotonic()
    try:
        assert list(impl.slow.each([{"seconds": 0.6}] * 3)) == [0.6] * 3  # 1.8 s of 3 x 1 s
        with pytest.raises(SubmissionError, match=r"timed out after 2 s.*its 2 calls together"):
            list(impl.slow.each([{"seconds": 1.5}, {"seconds": 1.5}]))
    finally:
        impl.close()
    assert time.monotonic() - started < 10


def test_a_call_over_its_time_limit_fails_with_the_same_words(toy):
    started = time.monotonic()
    with pytest.raises(SubmissionError, match=r"toy.py timed out after 2 s"):
        toy.slow(30)
    assert time.monotonic() - started < 10


# ------------------------------------------------------------------ what only the sandbox faces


class Replies(Runner):
    """A runner whose process answers every request with `reply`, whatever it was asked."""

    def __init__(self, reply):
        super().__init__("toy.py", Limits(2.0, 12.0))
        self.reply = reply

    def exchange(self, request, allowance, late):
        return self.reply, None


ONE = {"value": 1}


@pytest.mark.parametrize(
    "reply",
    [
        [ONE, ONE],  # not an object
        {"replies": {"0": ONE}},
        {"replies": []},
        {"replies": [ONE, ONE, ONE, ONE]},  # more replies than calls
        {"replies": [ONE, ONE]},  # fewer, and the last one returned
        {"replies": [ONE, 7]},
        {"replies": [ONE, {"value": {"__t": "pickle", "data": ""}}, ONE]},
        {"replies": [{"error": {"type": "ValueError", "message": "no"}}, ONE, ONE]},
    ],
    ids=["list", "dict", "none", "more", "fewer", "not-a-reply", "bad-value", "error-then-more"],
)
def test_a_malformed_reply_to_many_calls_is_the_submissions_fault(reply):
    with pytest.raises(SubmissionError, match="malformed reply|cannot be graded"):
        list(Replies(reply).each("scale", [{"x": 1}] * 3))


def test_a_reply_to_many_calls_may_end_at_the_first_exception():
    error = {"error": {"type": "ValueError", "builtin": "ValueError", "message": "no"}}
    got = Replies({"replies": [ONE, error]}).each("scale", [{"x": 1}] * 3)
    assert next(got) == 1
    with pytest.raises(ValueError, match="no"):
        next(got)


def sandboxed(tmp_path: Path, solution: str, **kwargs):
    problem = make_problem(tmp_path, solution, **kwargs)
    return load_implementation(problem, f"sandbox:{tmp_path / 'toy.py'}")


def call_fails(impl, match: str, *args) -> float:
    started = time.monotonic()
    with pytest.raises(SubmissionError, match=match):
        impl.scale(*args)
    impl.close()
    return time.monotonic() - started


@pytest.mark.parametrize(
    "body",
    [
        # Output as fast as it can, from threads too, and never answer.
        "import threading\n"
        "def spam():\n    while True:\n        print('x' * 10000, flush=True)\n"
        "def scale(x):\n    for _ in range(4):\n        threading.Thread(target=spam).start()\n"
        "    spam()\n",
        # Ignore the signals a timeout might send, and keep busy.
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT):\n    signal.signal(s, signal.SIG_IGN)\n"
        "def scale(x):\n    while True:\n        pass\n",
        # Answer a little at a time: a frame header, then nothing.
        "import os\ndef scale(x):\n    for fd in range(3, 12):\n        try:\n"
        "            os.write(fd, b'\\x00\\x00\\x10')\n        except OSError:\n            pass\n"
        "    import time\n    time.sleep(60)\n",
    ],
    ids=["flood", "ignore-signals", "trickle"],
)
def test_a_child_is_timed_out_at_its_limit_whatever_it_does(tmp_path, body):
    impl = sandboxed(tmp_path, body, time_limit=1)
    assert call_fails(impl, "timed out after 1 s", [1.0]) < 5


def test_a_submission_is_charged_its_own_time_once(tmp_path):
    # A limit of 1 s a call gives 6 s in all: ten calls of 0.4 s fit, counted once each
    # (the sandbox's own start-up is not the student's time either).
    impl = sandboxed(tmp_path, "import time\ndef scale(x):\n    time.sleep(0.4)\n    return x\n",
                     time_limit=1)  # fmt: skip
    try:
        assert [impl.scale(k) for k in range(10)] == list(range(10))
    finally:
        impl.close()


FORGE = """
import os, json, struct

def _frame(message):
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body

def scale(x):
    for fd in range(3, 12):
        try:
            os.write(fd, {payload})
        except OSError:
            pass
    import time
    time.sleep(60)
"""


@pytest.mark.parametrize(
    "payload, match",
    [
        ("b'\\x00\\x00\\x00\\x05junk!'", "sent malformed data"),
        ("_frame({'id': 1, 'value': 1.0})", "answered out of turn"),
        ("_frame({'id': 1, 'value': {'__t': 'pickle'}})", "answered out of turn|cannot be graded"),
        ("b'\\xff\\xff\\xff\\xff'", "sent malformed data"),
        # 12 MB of empty objects would parse into about 130 MB of Python objects.
        ("_frame({'id': 1, 'value': [{}] * 4_000_000})", "more JSON items than"),
    ],
    ids=["garbage", "forged-id", "forged-object", "huge-length", "container-flood"],
)
def test_forged_frames_fail_the_submission_not_the_grader(tmp_path, payload, match):
    impl = sandboxed(tmp_path, FORGE.replace("{payload}", payload))
    call_fails(impl, match, [1.0])


def test_a_tiny_reply_cannot_make_the_grader_allocate(tmp_path):
    impl = sandboxed(
        tmp_path, "import numpy as np\ndef scale(x):\n    return np.zeros((2**28, 0))\n"
    )
    call_fails(impl, "cannot be graded", [1.0])


def test_all_replies_together_are_capped(tmp_path, monkeypatch):
    from grader import loader

    monkeypatch.setattr(loader, "MAX_TOTAL_ELEMENTS", 2500)
    impl = sandboxed(tmp_path, "import numpy as np\ndef scale(x):\n    return np.zeros(1000)\n")
    impl.scale([1.0])
    impl.scale([1.0])
    call_fails(impl, "cannot be graded", [1.0])


@pytest.mark.parametrize(
    "body, match",
    [
        (
            "import os\ndef scale(x):\n    print('bye')\n    os._exit(3)\n",
            "(?s)exited with status 3.*bye",
        ),
        (
            "import os, signal\ndef scale(x):\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
            "killed by SIGSEGV",
        ),
        ("def scale(x):\n    return bytearray(3 * 1024**3)\n", "ran out of memory"),
        ("raise SystemExit(0)\ndef scale(x):\n    return x\n", "never exit"),
        (
            "import time\ntime.sleep(60)\ndef scale(x):\n    return x\n",
            "timed out while being imported",
        ),
    ],
    ids=["exit", "segfault", "memory", "exit-at-import", "slow-import"],
)
def test_crashes_are_explained(tmp_path, body, match):
    impl = sandboxed(tmp_path, body, time_limit=2)
    call_fails(impl, match, [1.0])


def _memory_groups() -> bool:
    group = cgroup.MemoryGroup.create()
    if group:
        group.remove()
    return group is not None


FILES_IN_MEMORY = """
import os
def scale(x):
    fds = []
    for _ in range(40):  # 600 MiB in files no process maps, each under the file size limit
        fds.append(os.memfd_create("f"))
        os.write(fds[-1], bytes(15 << 20))
    return len(fds)
"""
FORKED_PROCESSES = """
import os, time
def scale(x):
    children = []
    for _ in range(4):  # 4 x 120 MiB, each process well under its address-space limit
        pid = os.fork()
        if pid == 0:
            block = bytearray(120 << 20)
            block[::4096] = b"1" * len(block[::4096])
            time.sleep(0.5)
            os._exit(0)
        children.append(pid)
    return [os.waitpid(pid, 0)[1] for pid in children]
"""


@needs_bwrap
@pytest.mark.skipif(not _memory_groups(), reason="the grader cannot create memory cgroups here")
@pytest.mark.parametrize("body", [FILES_IN_MEMORY, FORKED_PROCESSES], ids=["memfd", "fork"])
def test_a_students_memory_is_counted_across_processes_and_files(tmp_path, monkeypatch, body):
    monkeypatch.setenv(LIMITS_ENV, json.dumps({"memory_mb": 256}))
    impl = sandboxed(tmp_path, body, time_limit=5)
    try:
        statuses = impl.scale(1)
    except SubmissionError as exc:  # the kernel killed its main process
        assert "ran out of memory: its processes together held more than its 256 MiB" in str(exc)
    else:  # or only some of its children: the main process saw them killed
        assert isinstance(statuses, list), statuses
        assert signal.SIGKILL in [os.WTERMSIG(s) for s in statuses if os.WIFSIGNALED(s)]
    impl.close()


@needs_bwrap
def test_the_sandbox_shows_no_test_reference_or_other_file(tmp_path):
    from grader.problems import KIT_ROOT

    body = f"""
import os
def scale(x):
    found = []
    for path in ["{KIT_ROOT}/reference/grpo_objective.py", "{KIT_ROOT}/problems/grpo_objective",
                 "{tmp_path}", "{KIT_ROOT}/README.md", "/etc/passwd"]:
        found.append(os.path.exists(path))
    return found
"""
    impl = sandboxed(tmp_path, body)
    assert impl.scale(1) == [False, False, False, False, False]
    impl.close()


@needs_bwrap
@pytest.mark.parametrize("where", ["usr/src/app", "venv/src/grpo-kit"])
def test_a_checkout_inside_a_bound_folder_shows_only_the_sandboxs_files(
    tmp_path, monkeypatch, where
):
    # A kit under a folder the sandbox binds whole (the venv, /usr) must not show its .git,
    # which holds every hidden test and reference solution.
    prefix = tmp_path / where.split("/")[0]
    kit = tmp_path / where
    for name in ("pyproject.toml", ".git/HEAD", "tests/test_secret.py", "reference/answer.py",
                 "grader/values.py", "problems/__init__.py"):  # fmt: skip
        (kit / name).parent.mkdir(parents=True, exist_ok=True)
        (kit / name).write_text("secret")
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.setattr(bwrap, "KIT_ROOT", kit)
    bwrap.system_binds.cache_clear()
    try:
        names = ["pyproject.toml", ".git/HEAD", "tests/test_secret.py", "reference/answer.py",
                 "grader/values.py", "problems/__init__.py"]  # fmt: skip
        script = "; ".join(f"test -e {kit / n} && echo {n}" for n in names) + "; true"
        shown = subprocess.run(bwrap.command((), (), ["/bin/sh", "-c", script]),
                               capture_output=True, text=True, timeout=60)  # fmt: skip
    finally:
        bwrap.system_binds.cache_clear()
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["grader/values.py", "problems/__init__.py"]


def test_a_server_warmed_ahead_is_the_one_the_first_student_gets():
    from grader.problems import get_problem
    from grader.sandbox.submission import key_for

    servers = forkserver.Servers()
    key = key_for(get_problem("grpo_objective"))
    try:
        servers.warm(key)
        warmed = servers.spares[key]
        servers.warm(key)  # no second one
        assert servers.spares[key] is warmed
        assert servers.acquire(key) is warmed
    finally:
        servers.close_all()


@needs_bwrap
def test_students_cannot_reach_each_other(tmp_path):
    """Two students of one fork server: distinct uids, neither can signal the other."""
    body = """
import os, signal
def scale(x):
    if x == "whoami":
        return [os.getuid(), os.getpid()]
    try:
        os.kill(int(x), signal.SIGKILL)
        return "killed"
    except OSError as exc:
        return type(exc).__name__
"""
    first = sandboxed(tmp_path / "a", body)
    second = sandboxed(tmp_path / "b", body)
    uid_a, pid_a = first.scale("whoami")
    uid_b, _ = second.scale("whoami")
    server = forkserver.SERVERS.shared.get(next(iter(forkserver.SERVERS.shared), None))
    if server is None or not server.own_uids:
        pytest.skip("this grader cannot give students uids of their own (not root)")
    assert uid_a != uid_b and uid_a >= forkserver.SANDBOX_UID_BASE
    assert second.scale(str(pid_a)) == "PermissionError"
    assert first.scale("whoami")[0] == uid_a, "the first student must still be alive"
    first.close()
    second.close()


@needs_bwrap
def test_no_process_of_a_student_outlives_its_problem(tmp_path):
    body = """
import os, time
def scale(x):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    return os.getuid()
"""
    impl = sandboxed(tmp_path, body)
    uid = impl.scale(1)
    impl.close()
    time.sleep(0.2)
    alive = [p for p in os.listdir("/proc") if p.isdigit() and _uid_of(p) == uid]
    assert not alive, f"processes of uid {uid} survived: {alive}"


def _uid_of(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


@needs_bwrap
def test_a_fork_bomb_meets_the_process_limit(tmp_path):
    body = """
import os, time
def scale(x):
    for made in range(1000):
        try:
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
        except OSError:
            return made
    return 1000
"""
    impl = sandboxed(tmp_path, body)
    made = impl.scale(1)
    impl.close()
    assert made < limits.SandboxLimits.nproc + 2


# ------------------------------------------------------------------ the grader's own failures


@pytest.mark.parametrize("how", ["start-up timeout", "no interpreter"])
def test_a_sandbox_that_does_not_start_is_the_graders_failure(tmp_path, monkeypatch, how):
    forkserver.SERVERS.close_all()
    if how == "start-up timeout":
        monkeypatch.setattr(forkserver, "STARTUP_GRACE_S", 0.0)
    else:
        monkeypatch.setattr(forkserver.sys, "executable", str(tmp_path / "no-such-python"))
    impl = sandboxed(tmp_path, TOY)
    with pytest.raises(GraderError, match="sandbox"):
        impl.scale([1.0])
    impl.close()
    forkserver.SERVERS.close_all()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_process_limit_counts_what_the_kernel_counts():
    # Under a setuid bwrap (same user namespace) the kernel counts the uid's processes outside
    # the sandbox's PID namespace too: the count the grader took there must be used.
    userns = os.stat("/proc/self/ns/user").st_ino
    assert limits._already_counted({"userns": userns, "count": 10_000}) == 10_000
    # In a user namespace of its own the kernel counts only those the process can see.
    own = limits._already_counted(None)
    assert 1 <= own < 10_000
    assert limits._already_counted({"userns": userns + 1, "count": 10_000}) == own


def test_signals_are_named_in_crash_messages():
    from grader.sandbox.submission import _ending

    assert "SIGSEGV" in _ending({"signal": int(signal.SIGSEGV)}, "x.py", limits.SandboxLimits())
    assert "memory limit of 1024 MiB" in _ending({"signal": 9}, "x.py", limits.SandboxLimits())


@needs_bwrap
def test_a_process_pool_works_as_it_does_locally_and_leaves_nothing(tmp_path):
    """A pool's locks are POSIX semaphores in /dev/shm: writable in the sandbox as anywhere
    (a pool raised PermissionError there alone), and what a student leaves there is removed
    with its processes."""
    body = """
import concurrent.futures
import os

def double(x):
    return 2 * x

def scale(x):
    if x == "leave":
        with open("/dev/shm/left-behind", "w") as file:
            file.write("for the next student")
        return sorted(os.listdir("/dev/shm"))
    if x == "look":
        return sorted(os.listdir("/dev/shm"))
    with concurrent.futures.ProcessPoolExecutor(max_workers=2) as pool:
        return list(pool.map(double, range(x)))
"""
    first = sandboxed(tmp_path / "a", body)
    assert first.scale(4) == [0, 2, 4, 6]
    assert "left-behind" in first.scale("leave")
    first.close()
    later = sandboxed(tmp_path / "b", body)
    assert later.scale("look") == []
    later.close()


@pytest.mark.parametrize("place", ["local", "sandbox"])
def test_an_import_over_the_time_limit_fails_with_the_same_words(tmp_path, place):
    """A file busy for longer than a call's limit while being imported passed every test
    locally and in check, and failed every one in grade."""
    if place == "sandbox" and not SANDBOXED:
        pytest.skip("needs a working bubblewrap")
    body = """
import time
started = time.monotonic()
while time.monotonic() - started < 3:  # a table built at import time
    pass

def scale(x):
    return 2 * x
"""
    problem = make_problem(tmp_path, body, time_limit=1)
    spec = str(tmp_path / "toy.py") if place == "local" else f"sandbox:{tmp_path / 'toy.py'}"
    impl = load_implementation(problem, spec)
    with pytest.raises(SubmissionError, match=r"toy.py timed out while being imported \(after 1"):
        impl.scale(1)
    impl.close()


@pytest.mark.parametrize("place", ["local", "sandbox"])
def test_temporary_files_work_where_the_solution_runs(tmp_path, place):
    """tempfile in a torch problem's sandbox: its fork server imported torch, which fixed
    tempfile's folder at /tmp, where no student may write (PermissionError in grade alone)."""
    if place == "sandbox" and not SANDBOXED:
        pytest.skip("needs a working bubblewrap")
    body = """
import tempfile
from pathlib import Path

def scale(x):
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "x.txt").write_text(str(x))
        with tempfile.NamedTemporaryFile() as file:
            return 2 * int((Path(folder) / "x.txt").read_text())
"""
    problem = make_problem(tmp_path, body, runtime="python")
    spec = str(tmp_path / "toy.py") if place == "local" else f"sandbox:{tmp_path / 'toy.py'}"
    impl = load_implementation(problem, spec)
    assert impl.scale(3) == 6
    impl.close()


PATCHES_THE_GRADER = """
import importlib
import numpy as np

try:  # the grader's in-place check switched off, its module found by a name built as text
    importlib.import_module("gra" + "der.execution")._changed_arguments = lambda *a: []
    found = "imported"
except Exception as exc:
    found = type(exc).__name__

def scale(x):
    x *= 2
    return found
"""


FINDS_THE_GRADER_IN_MAIN = """
import __main__
import inspect
import numpy as np

try:  # the fork server's `main`, whose globals led to the module of the check in use
    kit = inspect.getclosurevars(__main__.main).globals["Server"]
    kit.fork.__globals__["child"].Session._call = None
except Exception:
    pass

def scale(x):
    x *= 2
    return 1
"""


@pytest.mark.parametrize("solution", [PATCHES_THE_GRADER, FINDS_THE_GRADER_IN_MAIN],
                         ids=["import-by-name", "main-module"])  # fmt: skip
def test_the_kits_modules_a_submission_reaches_are_fresh_copies(tmp_path, solution):
    # logging.config's resolver, given "grader.execution.__setattr__" built as text, switched
    # the check off in the sandbox: a solution that changed its inputs rose from 3.6 to 25 of
    # 27 with no lead; so did one that walked from the fork server's __main__. Its process now
    # forgets the kit's modules, and gets an empty __main__, before importing the file.
    problem = make_problem(tmp_path, solution)
    impl = load_implementation(problem, f"sandbox:{tmp_path / 'toy.py'}")
    try:
        for _ in range(2):  # the check still holds on the call after
            with pytest.raises(SubmissionError, match="changed its input argument 1 in place"):
                impl.scale(np.ones(3))
    finally:
        impl.close()


@needs_bwrap
def test_threads_within_the_process_limit_start_as_they_do_locally(tmp_path):
    """glibc gave each thread an arena reserving 64 MiB of address space (up to 8 per core):
    a solution splitting 4M positions over 16 threads failed "can't start new thread" under
    the address-space limit alone, using a fraction of its memory. And a bare
    ThreadPoolExecutor() starts 32 workers on a machine of 28 cores or more: with the main
    thread, one more than the process limit once was."""
    body = """
import threading

def scale(x):
    barrier = threading.Barrier(x)
    held = []

    def work():
        held.append(bytearray(1000))  # a malloc in this thread: an arena of its own
        barrier.wait()

    threads = [threading.Thread(target=work) for _ in range(x)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(held)
"""
    impl = sandboxed(tmp_path, body)
    assert impl.scale(24) == 24
    assert impl.scale(40) == 40
    impl.close()


def test_what_a_student_leaves_in_dev_shm_goes_in_one_removal(tmp_path, monkeypatch):
    """150,000 full folders in /dev/shm took one `rm` each, minutes, past the grader's wait
    for the fork server: the student was reported as one the grader could not grade."""
    from grader.sandbox import zygote

    for i in range(300):
        (tmp_path / f"d{i}" / "inner").mkdir(parents=True)
        (tmp_path / f"d{i}" / "inner" / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "semaphore").write_text("x")
    started = []
    real_run = subprocess.run

    def run(command, **kwargs):
        started.append(command)
        return real_run(command, **kwargs)

    monkeypatch.setattr(zygote, "SHM", str(tmp_path))
    monkeypatch.setattr(zygote.subprocess, "run", run)
    zygote._remove_shm(os.getuid())
    assert list(tmp_path.iterdir()) == []
    assert len(started) == 1, f"{len(started)} processes started"
    zygote._remove_shm(os.getuid())  # nothing left: nothing started
    assert len(started) == 1


def test_a_toy_models_records_are_out_of_its_own_reach():
    """Round 14 rewrote a toy model's record of calls and switched its strictness off through
    its attributes, its __dict__ and copy's helpers (40.3 -> 52 of 52): nothing on the model
    holds them now, its constructor runs once, and a copy of it answers no call."""
    import copy

    import torch

    from problems.support.toy_models import build, calls_of

    model = build({"kind": "ContextLM", "seed": 3, "strict": True})
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        model(ids)
    assert len(calls_of(model)) == 1
    state = {**vars(model), **model.__dict__}
    assert not {"calls", "strict", "init_kwargs"} & set(state)
    with pytest.raises(RuntimeError, match="built once"):
        type(model).__init__(model, seed=3)
    with pytest.raises(RuntimeError, match="copy"):
        copy.deepcopy(model)(ids)
    assert torch.equal(model(ids), -model.logits(ids)), "autograd on: judged as strict"


def test_no_method_or_weak_reference_of_a_handed_object_leads_to_its_records():
    """Round 16: `model._records()` handed over a toy model's live records, and a
    WeakKeyDictionary's callback (reached through weakref.getweakrefs(optimizer)) the probes'
    whole dictionary (25.7 -> 44 of 44). Nothing a handed object offers reaches them now."""
    import weakref

    import torch

    from problems.grpo_trainer import probes
    from problems.support import toy_models

    model = toy_models.build({"kind": "ContextLM", "seed": 3, "strict": True})
    optimizer = probes.build_optimizer(model, {"kind": "SGD", "lr": 0.1})
    scheduler = probes.build_scheduler(optimizer, "halving")
    reward = probes.RecordingReward(next(iter(probes.REWARDS)))
    kept = [toy_models.RECORDS._kept, probes.RECORDS._kept]
    for handed in (model, optimizer, scheduler, reward):
        for link in weakref.getweakrefs(handed):
            assert link.__callback__ is None, f"a weak reference to {handed!r} calls back"
        for name in dir(handed):
            value = getattr(handed, name, None)
            if callable(value) and name.startswith("_record"):
                raise AssertionError(f"{type(handed).__name__}.{name} reaches its records")
            assert not any(value is k for k in kept), f"{name} is the records"
    with torch.no_grad():
        model(torch.tensor([[1, 2]]))
    assert toy_models.calls_of(model)[0]["grad_enabled"] is False


CONFINED = """
import marshal
import os
import sys
import typing
import zipfile

def scale(x):
    if x == "stdlib":  # modules not imported yet, its own source read by inspect, data files
        import fractions
        import inspect
        with open("data.txt", "w") as file:
            file.write("1/3")
        with open("data.txt") as file:
            third = fractions.Fraction(file.read())
        return [str(third), inspect.getsource(scale).splitlines()[0]]
    if x == "generated":  # code generators and text with nothing the class report flags
        import collections
        import dataclasses
        import pickle
        import timeit
        import torch
        Row = dataclasses.make_dataclass("Row", [("a", int), ("b", "list[int]")], frozen=True)
        Pair = collections.namedtuple("Pair", "left right")
        def typed(value: "typing.Optional[int]") -> "list[int]":
            return [value]
        namespace = {}
        exec("ANSWER = 6 * 7", namespace)
        data = pickle.loads(pickle.dumps({"t": torch.arange(3), "d": collections.OrderedDict()}))
        return [Row(1, [2]) == Row(1, [2]), Pair(1, 2).right, str(typing.get_type_hints(typed)),
                namespace["ANSWER"], timeit.timeit("1 + 1", number=1) >= 0, data["t"].tolist()]
    if x == "module":  # a module written to its own folder, then imported
        with open("hidden_helper.py", "w") as file:
            file.write("ANSWER = 42")
        sys.path.insert(0, os.getcwd())
        import hidden_helper
        return hidden_helper.ANSWER
    if x == "import_module":  # the same through importlib, which raises no "import" event
        import importlib
        with open("hidden_imported.py", "w") as file:
            file.write("ANSWER = 42")
        sys.path.append(os.getcwd())
        return importlib.import_module("hidden_imported").ANSWER
    if x == "importer_cache":  # sys.path untouched: a finder of a listed folder, pointed here
        import copy
        with open("hidden_cached.py", "w") as file:
            file.write("ANSWER = 42")
        key, finder = next((k, f) for k, f in sys.path_importer_cache.items()
                           if k in sys.path and hasattr(f, "_path_mtime"))
        moved = copy.copy(finder)
        moved.path, moved._path_mtime = os.getcwd(), -1
        sys.path_importer_cache[key] = moved
        import hidden_cached
        return hidden_cached.ANSWER
    if x == "own_source":  # its own file, rewritten, then imported under a name of its own
        import importlib
        with open(__file__, "w") as file:
            file.write("ANSWER = 42")
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))
        return importlib.import_module(os.path.basename(__file__)[:-3]).ANSWER
    if x == "own_name":  # other text compiled under its own file's name
        namespace = {}
        exec(compile("ANSWER = 42", __file__, "exec"), namespace)
        return namespace["ANSWER"]
    if x == "compiled":  # the same, compiled by hand: no source for anyone to read
        import importlib.util
        os.mkdir("compiled")
        with open("compiled/hidden_compiled.pyc", "wb") as file:
            code = marshal.dumps(compile("ANSWER = 42", "<hidden>", "exec"))
            file.write(importlib.util.MAGIC_NUMBER + bytes(12) + code)
        sys.path.append(os.path.abspath("compiled"))
        import hidden_compiled
        return hidden_compiled.ANSWER
    if x == "archive":  # a zip archive in /dev/shm
        with zipfile.ZipFile("/dev/shm/hidden.zip", "w") as archive:
            archive.writestr("hidden_zipped.py", "ANSWER = 42")
        sys.path.insert(0, "/dev/shm/hidden.zip")
        import hidden_zipped
        return hidden_zipped.ANSWER
    if x == "loader":  # a loader given the file's path, with sys.path as it was
        import importlib.util
        with open("hidden_loaded.py", "w") as file:
            file.write("ANSWER = 42")
        spec = importlib.util.spec_from_file_location("hidden_loaded", "hidden_loaded.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.ANSWER
    if x == "memory":
        return open("/proc/self/mem", "rb").read(1)
    if x == "memory_at":  # the same through a folder's descriptor, which no event shows
        return os.read(os.open("mem", os.O_RDONLY, dir_fd=os.open("/proc/self", os.O_RDONLY)), 1)
    if x == "program":
        import subprocess
        return subprocess.run(["/bin/true"]).returncode
    if x == "fork_exec":  # what subprocess runs underneath, which raises no audit event
        import _posixsubprocess
        return _posixsubprocess.fork_exec(*[None] * 23)
    if x == "fresh_fork_exec":  # a fresh copy of that module, with the real function
        import importlib
        import _posixsubprocess
        try:
            importlib.reload(_posixsubprocess).fork_exec(*[None] * 23)
        except PermissionError:
            pass
        del sys.modules["_posixsubprocess"]
        return importlib.import_module("_posixsubprocess").fork_exec(*[None] * 23)
    if x == "spawn":  # multiprocessing's spawn starts a fresh Python
        import multiprocessing
        process = multiprocessing.get_context("spawn").Process(target=print)
        process.start()
        process.join()
        return process.exitcode
    if x == "link":
        os.symlink("/etc/hostname", "link")
    if x == "folder":
        os.chdir("/usr")
    if x == "patched_check":  # the check's own function, replaced through an unflagged spelling
        [os][0].access = lambda *args, **kwargs: False
        with open("hidden_patched.py", "w") as file:
            file.write("ANSWER = 42")
        sys.path.insert(0, os.getcwd())
        import hidden_patched
        return hidden_patched.ANSWER
    if x == "read_only_folder":  # written, then made read-only: "could have written" still
        os.mkdir("frozen")
        with open("frozen/hidden_frozen.py", "w") as file:
            file.write("ANSWER = 42")
        os.chmod("frozen", 0o500)
        sys.path.insert(0, os.path.abspath("frozen"))
        import hidden_frozen
        return hidden_frozen.ANSWER
    if x == "renamed_fork_exec":  # the same library under another name, a fresh fork_exec
        import importlib.util
        import _posixsubprocess
        loader = importlib.machinery.ExtensionFileLoader("kit_fork", _posixsubprocess.__file__)
        spec = importlib.util.spec_from_file_location("kit_fork", _posixsubprocess.__file__,
                                                      loader=loader)
        return importlib.util.module_from_spec(spec).fork_exec(*[None] * 23)
    # Text made into code at run time, in which the class report would find a lead.
    if x == "text_exec":
        exec(HIDDEN, {})
    if x == "text_loader":  # a loader's source, compiled under "<string>"
        import importlib.abc
        class Loader(importlib.abc.InspectLoader):
            def get_source(self, fullname):
                return HIDDEN
        return Loader().load_module("hidden_text").ANSWER
    if x == "text_timer":
        import timeit
        return timeit.Timer(HIDDEN).timeit(1)
    if x == "text_forward_reference":
        return typing._eval_type(typing.ForwardRef(HIDDEN_EXPRESSION), {}, None)
    if x == "text_dataclass":  # a field name pasted into the generated __eq__
        import dataclasses
        Row = dataclasses.dataclass(init=False, repr=False)(type("Row", (), {"__annotations__": {
            "__class__, " + HIDDEN_EXPRESSION: int}}))
        return Row() == Row()
    if x == "text_pickle":  # a pickle that calls exec
        import pickle
        return pickle.loads(b"cbuiltins\\nexec\\n(" + pickle.dumps(HIDDEN, 0)[:-1] + b"tR.")
    if x == "pickled_reflection":  # a pickle's names walk attributes, its calls take them
        import pickle
        for named in (b"builtins\\ngetattr", b"torch.nn.modules.module\\n_global_forward_hooks",
                      b"builtins\\nobject.__getattribute__"):
            try:
                pickle.loads(b"c" + named + b"\\n.")
            except PermissionError:
                continue
            return named
        raise PermissionError("the sandbox refuses all three")
    if x == "text_under_a_library_name":
        exec(compile(HIDDEN, os.__file__, "exec"), {})
    if x == "text_in_utf7":  # what the scan reads as a comment, Python reads as a line
        exec(b"# coding: utf-7\\n#+AAo-import gc\\n", {})
    if x == "marshalled":
        return marshal.loads(marshal.dumps(compile("ANSWER = 42", "<hidden>", "exec")))
    if x == "code_by_hand":
        return (lambda: 0).__code__.replace(co_consts=(42,))
    return "not refused"


HIDDEN_EXPRESSION = "(lambda: 0).__globals__['__name__']"
HIDDEN = "ANSWER = " + HIDDEN_EXPRESSION
"""


@pytest.mark.parametrize("how", ["module", "import_module", "importer_cache", "own_source",
                                 "own_name", "compiled",
                                 "archive", "loader", "memory", "memory_at", "program", "fork_exec",
                                 "fresh_fork_exec", "spawn", "link", "folder", "patched_check",
                                 "read_only_folder", "renamed_fork_exec", "text_exec",
                                 "text_loader", "text_timer", "text_forward_reference",
                                 "text_dataclass", "text_pickle", "pickled_reflection",
                                 "text_under_a_library_name",
                                 "text_in_utf7", "marshalled", "code_by_hand"])  # fmt: skip
def test_a_sandboxed_submission_runs_no_code_it_wrote_and_starts_no_program(tmp_path, how):
    """Round 16: a module written to the student's own folder (or an archive in /dev/shm)
    and imported ran code no scan reads, which rewrote the probes' records (40.3 -> 52 of 52,
    no lead); round 17 did it past a check of sys.path (importlib.import_module, a finder
    in sys.path_importer_cache pointed at its folder, a .pyc). In the sandbox, a submission now loads no code from where it may write (except
    its own source), and starts no program; its data files work as anywhere. Round 19 turned
    the hook off by patching os.access through `[os][0]`, made its folder read-only before
    importing from it, and ran text through code generators (a loader's source, a timer, a
    forward reference, a pickle): text compiled at run time is now held to the class report's
    rules, and the hook calls nothing a submission can replace."""
    if not SANDBOXED:
        pytest.skip("needs a working bubblewrap")
    impl = sandboxed(tmp_path, CONFINED)
    assert impl.scale("stdlib") == ["1/3", "def scale(x):"]
    assert impl.scale("generated") == [
        True,
        2,
        "{'value': typing.Optional[int], 'return': list[int]}",
        42,
        True,
        [0, 1, 2],
    ]
    # zipimport turns the refusal into "no module named ...": nothing it held ran either way.
    refused = "sandbox refuses" if how != "archive" else "No module named 'hidden_zipped'"
    with pytest.raises((PermissionError, ImportError), match=refused):
        impl.scale(how)
    impl.close()


@pytest.mark.parametrize("place", ["local", "sandbox"])
def test_annotations_are_objects_as_when_python_imports_the_file(tmp_path, place):
    """Round 17: every submission was compiled under the grader's own `from __future__ import
    annotations`, so its annotations were text in check and grade but objects under Python."""
    if place == "sandbox" and not SANDBOXED:
        pytest.skip("needs a working bubblewrap")
    body = """
def f(x: int) -> int:
    return x

def scale(x):
    return repr(f.__annotations__["x"])
"""
    problem = make_problem(tmp_path, body, runtime="python")
    spec = str(tmp_path / "toy.py") if place == "local" else f"sandbox:{tmp_path / 'toy.py'}"
    impl = load_implementation(problem, spec)
    assert impl.scale(1) == "<class 'int'>"
    impl.close()


def test_a_toy_kv_cache_key_follows_from_nothing_the_solution_knows():
    """Round 18 found a toy cache's key from the model's seed (its weights give the seed away)
    and built caches from token ids with it (47.8 -> 53 of 53): each model draws its own."""
    import torch

    from problems.support.toy_models import ToyLM, build

    ids = torch.tensor([[1, 2, 3]])
    caches = []
    for _ in range(2):
        model = build({"kind": "CachedContextLM", "seed": 3})
        with torch.no_grad():
            caches.append(model(ids, use_cache=True).past_key_values[0])
        with pytest.raises(ValueError, match="cache this model returned"):
            model(ids[:, :1], past_key_values=(ids.double(),), use_cache=True)
    assert not torch.equal(*caches), "two models of one spec key their caches alike"
    # Nor does a method of its own build one (model._keyed(ids) did): the toy classes define
    # only what a model needs, and their records are reached by this module's functions.
    own = {name for kind in type(model).__mro__ if issubclass(kind, ToyLM)
           for name, value in vars(kind).items() if callable(value)}  # fmt: skip
    assert own <= {"__init__", "forward", "logits", "_weights"}, sorted(own)
