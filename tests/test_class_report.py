"""The class report on a generated class (a Gradescope export, graded with a course file): score
histograms, the tests most students fail, late submissions, similar files, code that reaches
into the grader."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader.cli import main
from grader.problems import KIT_ROOT, get_problem
from grader.similarity import similar_groups, tokens
from grader.tampering import leads

SLUG, OTHER = "grpo_objective", "group_stats"
REFERENCE = get_problem(SLUG).reference.read_text()
WRONG = "def grpo_objective(*args, **kwargs):\n    return 0.0\n"
ONE = "import gc\n\n\ndef grpo_objective(*args, **kwargs):\n    return 1.0\n"


def disguised(source: str) -> str:
    """The reference as a copier hands it in: names changed, comments gone, spacing changed."""
    for old, new in (("unclipped", "plain_term"), ("clipped", "cut_term"), ("surrogate", "obj"),
                     ("pi_theta", "policy"), ("kl", "divergence")):  # fmt: skip
        source = re.sub(rf"\b{old}\b", new, source)
    lines = [line for line in source.splitlines() if not line.strip().startswith("#")]
    return "\n\n".join(lines) + "\n"


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def test_similar_files_are_found_whatever_their_names():
    copy = disguised(REFERENCE)
    assert tokens(copy) == tokens(REFERENCE)
    others = {f"s{i}": f"def grpo_objective(a, b, c, d):\n    return float(sum(a) * {i} - len(b))\n"
              for i in range(4)}  # fmt: skip
    groups = similar_groups({"ada": REFERENCE, "grace": copy, **others},
                            get_problem(SLUG).stub.read_text())  # fmt: skip
    assert [(g.students, g.similarity) for g in groups] == [(("ada", "grace"), 1.0)]
    assert similar_groups({"ada": REFERENCE, "bob": "def grpo_objective(:\n"}) == []


def test_an_expression_nested_past_the_recursion_limit_is_compared_too():
    # 1 + 1 + ... with 2,000 terms parses (and grades), but nests 2,000 levels deep.
    deep = REFERENCE + "\n_PAD = " + " + ".join(["1"] * 2000) + "\n"
    assert tokens(deep)[: len(tokens(REFERENCE))] == tokens(REFERENCE)
    assert [g.students for g in similar_groups({"ada": REFERENCE, "eve": deep})] == [("ada", "eve")]


def test_the_report_of_a_generated_class(tmp_path, capsys):
    export = tmp_path / "download" / "assignment_5_export"
    people = {"ada": REFERENCE, "grace": disguised(REFERENCE), "alan": WRONG, "edsger": ONE,
              "barbara": None}  # fmt: skip
    metadata = []
    for number, (name, source) in enumerate(people.items(), 1):
        folder = export / f"submission_{number}"
        folder.mkdir(parents=True)
        if source is not None:
            (folder / f"{SLUG}.py").write_text(source)
        (folder / f"{OTHER}.py").write_text("def group_stats(*a, **k):\n    return {}\n")
        when = "2026-03-16 10:00:00 +00:00" if name == "grace" else "2026-03-14 10:00:00 +00:00"
        metadata.append(f"submission_{number}:\n  :submitters:\n  - :name: {name.title()} <b>\n"
                        f"    :email: {name}@example.edu\n  :created_at: {when}\n")  # fmt: skip
    (export / "submission_metadata.yml").write_text("".join(metadata))
    course = tmp_path / "course.toml"
    course.write_text(f'title = "HW <1>"\nproblems = ["{SLUG}", "{OTHER}"]\n'
                      "[late]\ndue = 2026-03-15T00:00:00Z\npenalty_per_day = 0.1\n")  # fmt: skip
    grades = tmp_path / "grades"
    run = subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(tmp_path / "download"),
                          "--out", str(grades), "--course", str(course), "--time-limit", "3"],
                         cwd=KIT_ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "gradescope layout: 5 students" in run.stderr

    report = tmp_path / "report"
    assert main(["report", str(grades), "--out", str(report)]) == 0
    assert ("5 students, 2 problems, 1 late, 1 groups of similar files, 1 files that reach into "
            "the grader") in capsys.readouterr().out  # fmt: skip
    problems = {row["problem"]: row for row in read_csv(report / "problems.csv")}
    objective = problems[SLUG]
    assert (objective["students"], objective["handed_in"]) == ("5", "4")
    assert objective["100%"] == "2" and objective["full_marks"] == "2"
    assert sum(int(objective[k]) for k in objective if k.endswith("%")) == 4
    assert problems[OTHER]["100%"] == "0" and problems[OTHER]["0-9%"] == "5"
    tests = read_csv(report / "tests.csv")
    first = tests[0]
    assert float(first["failure_rate"]) >= float(tests[-1]["failure_rate"])
    example = next(t for t in tests if t["test"] == "test_reference_example")
    assert (example["failed"], example["out_of"]) == ("2", "4")  # of those who handed it in
    assert example["most_common_message"] == "result: expected #, got #"
    late = read_csv(report / "late.csv")
    assert [(r["student"], r["penalty_share"]) for r in late] == [("grace@example.edu", "0.2")]
    similar = read_csv(report / "similar.csv")
    assert [(r["problem"], r["students"]) for r in similar] == [
        (SLUG, "ada@example.edu grace@example.edu")]  # fmt: skip
    tampering = read_csv(report / "tampering.csv")
    assert [(r["student"], r["problem"], r["line"]) for r in tampering] == [
        ("edsger@example.edu", SLUG, "1")]  # fmt: skip
    page = (report / "index.html").read_text()
    assert "<svg" in page and "HW &lt;1&gt;" in page and "<b>" not in page.split("</style>")[1]
    assert main(["report", str(grades), "--out", str(grades / "report")]) == 2
    assert main(["report", str(tmp_path / "nothing"), "--out", str(report)]) == 2


def test_the_kits_own_solutions_reach_into_nothing():
    problems = [get_problem(p.name) for p in (KIT_ROOT / "problems").iterdir()
                if (p / "problem.toml").is_file()]  # fmt: skip
    files = [problem.stub for problem in problems]
    files += sorted((KIT_ROOT / "reference").glob("*.py"))
    assert len(files) > 30
    assert {str(f): leads(f.read_text()) for f in files if leads(f.read_text())} == {}


def test_code_that_reaches_into_the_grader_is_a_lead():
    attacks = KIT_ROOT / "tests" / "adversarial"
    for name in ("patch_pytest.py", "poison_inputs.py", "grpo_loss_torch/fake_probes.py",
                 "grpo_trainer/reward_per_group.py", "kill_the_grader.py"):  # fmt: skip
        assert leads((attacks / name).read_text()), name
    source = """import sys
import importlib
import torch


def sample_group(model, prompt_ids, *args, **kwargs):
    model.strict = False
    log = getattr(model, "calls")
    frame = sys._getframe(1).f_globals
    values = importlib.import_module("grader.values")
    return torch.stack([prompt_ids])
"""
    assert [lead.line for lead in leads(source)] == [7, 8, 9, 9, 10]
    assert leads("x = torch.stack(calls)\ny = inspect.signature(f)\n") == []
    hidden = ("exec(code)\nsetattr(model, name, False)\ngetattr(out, 'logits', out)\n"
              "vars(model)['calls'].clear()\n")  # fmt: skip
    assert [lead.line for lead in leads(hidden)] == [1, 2, 4, 4]  # vars, and 'calls' as text
    # A record reached by a name built at run time, strictness switched off past the model's
    # own __setattr__, unjudged scores: each a lead; HF's `output.logits` is none.
    forged = ("record = getattr(model, 'ca' + 'lls')\nobject.__setattr__(model, 'x', False)\n"
              "scores = model.logits(ids)\nlogits = model(ids).logits\n")  # fmt: skip
    assert [lead.line for lead in leads(forged)] == [1, 2, 3]
    assert leads("def broken(:\n") == []
    # Nested past what the parser takes: no lead, and no crash of the whole class report.
    assert leads("x = " + "+".join(["1"] * 100_000) + "\n") == []
    assert leads("x = a" + ".b" * 100_000 + "\n") == []


def test_records_reached_through_an_alias_or_a_name_as_text_are_leads():
    # The same edits as above with no `.calls`, no `.strict` and no getattr(x, "calls"): the
    # builtin under another name or handed to a helper, or the attribute named as text.
    source = """import functools
import operator
from operator import attrgetter


def sample_group(model, prompt_ids, *args, **kwargs):
    put = setattr
    put(model, "strict", False)
    operator.attrgetter("calls")(model).clear()
    functools.reduce(getattr, ["calls"], model).append({})
    functools.partial(setattr, model, "strict", False)()
    type(model).__init__(model, **{**model.init_kwargs, "strict": False})
    model.__init__(seed=0)
    return prompt_ids
"""
    assert sorted({lead.line for lead in leads(source)}) == [3, 7, 8, 9, 10, 11, 12, 13]
    # A module whose name is built at run time is not named anywhere.
    built = "v = importlib.import_module('gra' + 'der.values')\nw = __import__(''.join(parts))\n"
    assert [lead.line for lead in leads(built)] == [1, 2]
    # A module under another name is the same module.
    renamed = "import os as o\nimport operator as op\no.kill(1, 9)\nop.attrgetter(name)(model)\n"
    assert [lead.line for lead in leads(renamed)] == [3, 4]
    # The table of modules however it is reached, and the kit's modules named as its keys.
    table = ("import sys as _s\nt = getattr(_s, 'modules')\ns = sys\ns.modules\n"
             "__import__('sys').modules\nx = t.get('grader.execution')\n"
             "y = t['problems.grpo_loss_torch.probes']\nz = t.get('_pytest.runner')\n")  # fmt: skip
    assert [lead.line for lead in leads(table)] == [2, 4, 5, 6, 7, 8]
    # ... but not torch's model.modules(), getattr(torch, "stack"), or "problems" as a word.
    honest = "for m in model.modules():\n    f = getattr(torch, 'stack')\nw = 'problems'\n"
    assert leads(honest) == []
    # A class building its own object is none.
    own = "class A(B):\n    def __init__(self):\n        super().__init__()\n        B.__init__(self)\n"
    assert leads(own) == []
    # The model's class swapped for one whose judged() and record() lie, or its attributes
    # read and written back as a dict: no record is named as an attribute (a sampler with two
    # bugs rose from 42.4 to 49 of 49 either way with no lead).
    swapped = """def sample_group(model, prompt_ids, *args):
    model.__class__ = Lenient
    m = model
    m.__class__ = Lenient
    setattr(model, "__class__", Lenient)
    state = model.__getstate__()
    state[STRICT] = False
    model.__setstate__(state)
    KEY = "calls"
    model.__reduce_ex__(2)[2]["strict"] = False
    NAME = "__dict__"
    getattr(model, NAME)[STRICT] = False
"""
    assert [lead.line for lead in leads(swapped)] == [2, 4, 5, 6, 8, 9, 10, 10, 11, 12]
    # A library's function patched for everyone who calls it: the toy model asked torch
    # whether autograd was on and heard no (a sampler that left it on rose from 42.4 to 49).
    patched = ("import torch as t\nfrom torch import nn\nt.is_grad_enabled = lambda: False\n"
               "nn.Module.__call__ = call\nsetattr(t, name, f)\n__import__('torch').x = 1\n"
               "model.weight = w\nt.manual_seed(0)\n")  # fmt: skip
    assert [lead.line for lead in leads(patched)] == [3, 3, 4, 4, 5, 5, 6]
    assert len(leads("import numpy\nnumpy" + ".b" * 2500 + " = 1\n")) == 1  # shown, not recursed
    # import_module under another name: the input check switched off with no lead (a solution
    # that overwrote its input rose from 3.6 to 26 of 27 of group_advantages).
    loader = ("from importlib import import_module as load\nw = load('gra' + 'der.execution')\n"
              "w._changed_arguments = lambda *a: []\nimport importlib\n"
              "imp = importlib.import_module\nimp('gc')\n")  # fmt: skip
    assert [lead.line for lead in leads(loader)] == [2, 3, 6]
    # torch's own calls intercepted while the sampler runs: a mode answering -logits with the
    # logits undid a strict model's judging (42.4 -> 47.7 of 49), or an operator replaced.
    modes = ("from torch.overrides import TorchFunctionMode\nclass M(TorchFunctionMode):\n"
             "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
             "        return args[0]\nimport torch.library\nlib = torch.library.Library\n"
             "from torch import library\n")  # fmt: skip
    assert [lead.line for lead in leads(modes)] == [3, 5, 6, 7]
    # ... but a layer a function built itself may change class (reference/model_setup.py).
    assert leads("def f(model):\n    head = get_head(model)\n    head.__class__ = F32\n") == []
    # Honest code names none of them: a default for a missing attribute, a list called calls.
    assert leads("x = getattr(out, 'logits', out)\ncalls = []\ncalls.append(1)\n") == []


def test_modules_found_by_text_and_classes_reached_otherwise_are_leads():
    # The input check switched off through a module no import names: pkgutil.resolve_name,
    # importlib.__import__, a pickle whose data calls import_module, unittest.mock.patch with a
    # built target (each rose from 3.6 to 26 of 27 of group_advantages with no lead).
    found = ("import pkgutil\nw = pkgutil.resolve_name('gra' + 'der.execution')\nimport importlib\n"
             "w = importlib.__import__('gra' + 'der.execution', fromlist=['x'])\n"
             "w._changed_arguments = f\nimport pickle\nfrom unittest import mock\n"
             "from pydoc import locate\nimport marshal, copyreg\n")  # fmt: skip
    assert [lead.line for lead in leads(found)] == [1, 2, 2, 4, 4, 5, 6, 7, 8, 9, 9]
    # The model's class swapped through a name no alias leads back to a parameter (a sampler
    # with two bugs rose from 43.4 to 50 of 50 each way), or its class's methods replaced
    # through type(model) (43.4 -> 44.7: forward run under no_grad for a sampler without it).
    swapped = """def sample_group(model, prompt_ids):
    for m in [model]:
        m.__class__ = Lenient
    (n := model).__class__ = Lenient
    [model][0].__class__ = Lenient
    a, = model,
    a.__class__ = Lenient
    type(model).forward = forward
    cls = model.__class__
    cls.record = record
    setattr(type(model), "forward", forward)
"""
    assert [lead.line for lead in leads(swapped)] == [3, 4, 5, 7, 8, 8, 10, 10, 11, 11, 11]
    # The class swapped in is built on the handed one, however the swap itself is hidden
    # (m = getattr(model, "_", model) reads as a layer looked up), or at run time.
    built = ("def lenient(cls):\n    class Lenient(cls):\n        pass\n"
             "class L(type(model).__mro__[0]):\n    pass\nL = type('L', (base,), {})\n")  # fmt: skip
    assert [lead.line for lead in leads(built)] == [2, 4, 4, 6]  # __mro__ itself too
    # A chain of aliases longer than code needs ends nowhere known (and is followed once).
    chain = "def f(model):\n    a0 = model\n" + "".join(
        f"    a{i} = a{i - 1}\n" for i in range(1, 200)) + "    a199.__class__ = X\n" * 3000  # fmt: skip
    assert len(leads(chain)) == 3000
    # torch reached with no import naming it, its answer about autograd replaced (a sampler
    # that left autograd on rose from 43.4 to 50 of 50), a special method set on a class from
    # outside it (Tensor.__neg__ undoes -logits), the toy model's own module found.
    asked = ("t = [torch][0]\nt.is_grad_enabled = f\nsetattr(t, 'is_inference_mode_enabled', f)\n"
             "T = [torch][0].Tensor\nT.__neg__ = f\nfrom inspect import getmodule\n"
             "getmodule(type(model)).torch = t\nf.__name__ = 'g'\ntorch.is_grad_enabled()\n")  # fmt: skip
    assert [lead.line for lead in leads(asked)] == [2, 3, 3, 5, 6]
    # A class of its own with a toy model's methods, swapped in through a lookup: its judged()
    # answers every call (a sampler with two bugs rose from 43.4 to 48.7 of 50 with no lead).
    quiet = ("class Quiet(torch.nn.Module):\n    def judged(self, logits, reread=False):\n"
             "        return logits\n    def record(self, *a):\n        pass\n"
             "    def forward(self, x):\n        return x\n"
             "def record(x):\n    return x\n")  # fmt: skip
    assert [lead.line for lead in leads(quiet)] == [2, 4]
    # Or the model's own forward replaced on the object, run under no_grad for a sampler that
    # left autograd on (43.4 -> 44.7 of 50); an output's .logits field is set as usual.
    own = "model.forward = quiet\ndel model.forward\nsetattr(model, 'record', f)\nout.logits = z\n"
    assert [lead.line for lead in leads(own)] == [1, 2, 3, 3]
    # A hook that answers for the toy model: its judging undone (43.4 -> 44.7 of 50, no lead).
    hooks = ("h = model.register_forward_hook(plain, with_kwargs=True)\n"
             "from torch.nn.modules.module import register_module_forward_pre_hook as pre\n")  # fmt: skip
    assert [lead.line for lead in leads(hooks)] == [1, 2]
    # A name built from pieces and kept first: strict switched off and the records rewritten
    # (a sampler that left autograd on rose from 43.4 to 50 of 50 with no lead).
    kept = ("SA = '__set' + 'attr__'\nST: str = 'st' + 'rict'\nCL = 'sllac'[::-1]\n"
            "getattr(model, SA)(ST, False)\nhasattr(model, CL)\ngetattr(model, 'sllac'[::-1])\n"
            "for name in ('lr', 'beta'):\n    getattr(config, name)\n")  # fmt: skip
    assert [lead.line for lead in leads(kept)] == [1, 2, 3, 4, 5, 6]
    # A dotted field resolved by string.Formatter to the object's own dict (43.4 -> 50 of 50).
    fields = ("own, _ = Formatter().get_field('0.__dict__', [model], {})\n"
              "x = 'model.callsign and 3.5 and a.strict_mode'\n")  # fmt: skip
    assert [lead.line for lead in leads(fields)] == [1, 1]
    # Every attribute listed, then read by the loop's name: strict off through the bound
    # __setattr__ found that way, the records rewritten (43.4 -> 50 of 50 with no lead).
    listed = (
        "for name in dir(model):\n    getattr(model, name)\nlook = vars\nobject.__dir__(model)\n"
    )
    assert [lead.line for lead in leads(listed)] == [1, 2, 3, 4]
    # A module's class kept in a name first, then patched: every model's call run under
    # no_grad for a sampler that left autograd on (43.4 -> 44.7 of 50 with no lead).
    kept_class = ("import torch\nM = torch.nn.Module\nN = M.Sub\nN._call_impl = f\n"
                  "M._call_impl = f\nhead = model.lm_head\nhead.weight = w\n")  # fmt: skip
    assert [lead.line for lead in leads(kept_class)] == [4, 4, 5, 5]  # _call_impl itself too
    # ... while a layer the function looked up may still change class, and an object's own
    # attributes are set as usual.
    own = ("def f(model):\n    head = get_head(model) if model else None\n"
           "    head.__class__ = F32\n    model.weight = w\n    kind = type(model)\n"
           "    out = kind(1)\n    out.x = 1\n")  # fmt: skip
    assert leads(own) == []


def test_profilers_hook_dicts_class_loops_and_names_from_elsewhere_are_leads():
    # A profiler switching autograd off around every forward, torch's hook dicts filled
    # directly, a class reached by a loop, and getattr names the source does not show: each
    # raised a sampler that left autograd on from 43.4 to 49 or 50 of 50 with no lead.
    profiled = ("import sys\nsys.setprofile(watch)\nimport threading as t\nt.settrace(f)\n"
                "from torch.nn.modules import module as mm\nmm._global_forward_pre_hooks[1] = f\n"
                "model._forward_hooks[1] = g\nfor k in type(model).__mro__:\n    k._call_impl = q\n"
                "for k in [type(model)]:\n    k.logits = neg\n")  # fmt: skip
    assert sorted({lead.line for lead in leads(profiled)}) == [2, 4, 6, 7, 8, 9, 11]
    names = """def text(codes):
    return "".join(map(chr, codes))
def look(thing, name):
    return getattr(thing, name)
look(model, text([115]))
for n in [text([99])]:
    getattr(model, n)
class K:
    n = text([97])
getattr(model, K.n)
def c(m, n="calls"):
    return getattr(m, n)
c(model)
"""
    assert [lead.line for lead in leads(names)] == [4, 7, 10, 11, 12]
    honest = """FIELDS = ("ids", "mask")
def fields_of(out):
    return {name: field(out, name) for name in FIELDS}
def field(out, name):
    return getattr(out, name, None)
def check(config):
    for name in ("lr", "beta"):
        if getattr(config, name) < 0:
            raise ValueError(name)
    return [getattr(config, f.name) for f in fields(config)]
for p in model.parameters():
    p.requires_grad = False
"""
    assert leads(honest) == []


def test_matches_code_run_from_text_and_annotations_are_leads():
    # Each raised a sampler that left autograd on from 43.4 to 50 of 50 with no lead: a class
    # pattern reading __setattr__ and calls, __match_args__ built at run time matched by a
    # class that takes any object, timeit running built text, a function's code rebuilt with
    # another name, and an annotation given as text that singledispatch's register runs.
    matched = """match model:
    case object(__setattr__=put, calls=records):
        pass
class Any(type):
    def __instancecheck__(cls, obj):
        return True
class Peek(metaclass=Any):
    __match_args__ = (text([99]),)
class Point:
    __match_args__ = ("x", "y")
"""
    assert [lead.line for lead in leads(matched)] == [2, 2, 5, 8]
    run = ("import timeit\nf = types.FunctionType(g.__code__.replace(co_names=(n,)), {})\n"
           "import runpy\ns = importlib.util.spec_from_file_location(n, p)\n")  # fmt: skip
    assert sorted({lead.line for lead in leads(run)}) == [1, 2, 3, 4]
    noted = ("def _(x: \"setattr(held[0], ''.join(map(chr, [115])), False) or int\"):\n"
             "    pass\ndef f(x: 'Optional[int]') -> 'torch.Tensor':\n    y: 'list[int]' = []\n")  # fmt: skip
    assert sorted({lead.line for lead in leads(noted)}) == [1]


def test_resolvers_of_dotted_names_are_leads():
    # logging.config's resolver reached grader.execution by a name built as text and switched
    # the in-place check off (a solution that changed its inputs: 3.6 -> 25 of 27, no lead).
    resolved = ("import logging.config\nfrom logging import config\n"
                "r = config.BaseConfigurator({}).resolve\nfrom importlib.metadata import EntryPoint\n"
                "import shelve\nx = getattr(model, 'config', None)\n")  # fmt: skip
    assert sorted({lead.line for lead in leads(resolved)}) == [1, 2, 3, 4, 5]


def test_loaders_told_to_unpickle_are_leads():
    # Protocol-0 bytes built from ints, handed to torch.load(io.BytesIO(data), weights_only=False),
    # ran exec on text that switched strict off (43.4 -> 48.7 of 50 with no lead).
    loaded = ("a = torch.load(io.BytesIO(data), weights_only=False)\n"
              "b = np.load(f, allow_pickle=True)\nc = np.load(f, allow_pickle=flag)\n"
              "d = torch.load(path, weights_only=True)\ne = np.load(f)\n")  # fmt: skip
    assert [lead.line for lead in leads(loaded)] == [1, 2, 3]


def test_attributes_set_by_library_calls_the_main_module_and_ctypes_elsewhere_are_leads():
    # Each raised a sampler that left autograd on from 44.5 to 51 of 51, or an in-place bug
    # from 3.6 to 25 of 27, with no lead: functools.update_wrapper and an argument parser
    # setting attributes named by text (on torch itself), the fork server's __main__ walked to
    # the grader's modules, and ctypes reached as numpy.ctypeslib.ctypes.
    by_name = """functools.update_wrapper(model, ns, assigned=(ST,), updated=())
update_wrapper(torch, fake, (name,), ())
parser.add_argument("--off", dest="is_grad_enabled", action="store_const", const=f)
parser.parse_args(["--off"], namespace=torch)
C = np.ctypeslib.ctypes
import __main__
g = inspect.getclosurevars(main).globals
os.posix_spawn(exe, argv, env)
@functools.wraps(f)
def w(*a):
    return f(*a)
args = parser.parse_args()
memory = open("/proc/self/mem", "r+b")
import _ctypes, posix
"""
    assert sorted({lead.line for lead in leads(by_name)}) == [1, 2, 3, 4, 5, 6, 7, 8, 13, 14]


def test_modules_patched_through_an_expression_or_a_parameter_are_leads():
    # Round 19: `[os][0].access = ...` switched the sandbox's check off, and the same spelling
    # on torch.optim.optimizer's `chain` and lr_scheduler's `zip` hid an extra optimizer or
    # scheduler step (25.7 -> 44 and 42.8 -> 44 of 44), with no lead. Values and attributes of
    # imported names read as usual are not leads.
    patched = """import os
import torch
import torch.optim.optimizer as stepping
[stepping][0].chain = lambda *kinds: ()
del [torch.optim.lr_scheduler][0].zip
(lambda: os)().access = len
(os if flag else None).access = len
(m := os).access = len
getattr(torch, "optim").x = 1
for m in [os]:
    m.access = len
def patch(module=os):
    module.access = len
def patch_given(given):
    given.access = len
patch_given(os)
alias = [torch.optim.lr_scheduler][0]
alias.zip = len
x = torch.zeros(3, dtype=torch.float32)
x.requires_grad = True
batch = [x, torch.float32]
batch[0].grad = None
for dtype in (torch.float32, torch.bfloat16):
    y = x.to(dtype)
"""
    assert sorted({lead.line for lead in leads(patched)}) == [4, 5, 6, 7, 8, 9, 11, 13, 16, 18]


def test_memory_without_bounds_and_a_constructor_run_again_are_leads():
    # Round 13: numpy's as_strided walked memory to the live grader and switched its in-place
    # check off (4.65 -> 27 of 29), and swapped a toy model's class with `class Q(*kinds)`
    # (45.5 -> 52 of 52); `kind = type(self); kind.__init__(self)` outside a constructor reset
    # a model's records (45.5 -> 48.45). None had a lead.
    memory = """window = np.lib.stride_tricks.as_strided(a, (8,), (2**40,))
from numpy.lib.stride_tricks import as_strided
import numpy.lib._stride_tricks_impl as impl
class Raw:
    __array_interface__ = {"data": (address, False)}
view = np.asarray(Raw())
spec = np.lib.stride_tricks.DummyArray
class Q(*kinds):
    pass
saved = model.init_kwargs
"""
    assert sorted({lead.line for lead in leads(memory)}) == [1, 2, 3, 5, 7, 8, 10]
    rerun = """def reset(self):
    kind = type(self)
    kind.__init__(self, seed=0)
class H:
    def __init__(self, model):
        self = model
        Base.__init__(self)
    def again(self):
        Base.__init__(self)
def __init__(self):
    Base.__init__(self)
again = functools.partial(ToyLM.__init__, model)
getattr(kind, "__init__")(model)
super(kind, model).__init__()
class G(Base):
    def __init__(self):
        def inner(self):
            Base.__init__(self)
"""
    assert sorted({lead.line for lead in leads(rerun)}) == [3, 7, 9, 11, 12, 13, 14, 18]
    # ... but a class building its own object, in any of the usual spellings, has none; nor
    # torch's own as_strided, which checks its bounds.
    own = """class A(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        super(A, self).__init__()
        nn.Module.__init__(self)
    def reset(self):
        super().__init__()
windows = x.as_strided((2, 3), (1, 1))
y = torch.as_strided(x, (2,), (1,))
"""
    assert leads(own) == []


def test_text_built_from_pieces_and_the_copy_modules_insides_are_leads():
    # Round 14: copy's deepcopy memo read a toy model's records and copy._reconstruct wrote
    # {"st" + "rict": False} into it, or "_".join(["is", "grad", "enabled"]) into torch
    # (40.3 -> 52 of 52, 45.5 -> 52), with no lead.
    built = """copy._reconstruct(model, None, f, (), {"st" + "rict": False})
name = "_".join(["is", "grad", "enabled"])
key = f"{'ca'}lls"
key = "sllac"[::-1]
key = b"strict".decode()
key = "STRICT".lower()
key = "ca" + "l" * 2 + "s"
module = "gra" + "der.values"
originals = copy.deepcopy(model, memo)[id(memo)]
key = "%sls" % "cal"
key = "{}{}".format("st", "rict")
"""
    assert sorted({lead.line for lead in leads(built)}) == list(range(1, 12))
    # ... but text built from other pieces, or from names, is none; nor a plain deepcopy.
    honest = """label = "call" + "s per row"
tag = f"{name}_{step}"
word = "abc"[::-1] + "xyz"[::k]
head = "=" * 10**9
line = "%d calls" % n
line = "{} of {}".format(a, "steps")
clone = copy.deepcopy(model)
"""
    assert leads(honest) == []


def test_builtins_frames_and_hooks_reached_through_other_names_are_leads():
    # Round 15: a builtin reached as an attribute (len.__self__.exec, torch.builtins.vars) ran
    # hidden code or read a model's attributes; _operator.attrgetter with a name built by chr
    # cleared a probe's hooks; a TorchFunctionMode given __torch_function__ by assignment undid
    # a strict model's judging (40.3 -> 52 of 52, 43 -> 44 of 44, 45.5 -> 50.7), none a lead.
    reached = """run = len.__self__.exec
state = torch.builtins.vars(model)
import _operator
_operator.attrgetter(name)(policy).clear()
frame = __import__("sys")._getframe(1)
class Lenient(TorchFunctionMode):
    __torch_function__ = route
frames = inspect.getinnerframes(error.__traceback__)
sys.meta_path.insert(0, finder)
frame = coroutine.cr_frame
values = thing.getattr(model, name)
"""
    assert sorted({lead.line for lead in leads(reached)}) == [1, 2, 3, 4, 5, 7, 8, 9, 10, 11]
    # ... but torch's model.eval() and torch.compile are none.
    honest = ("model.eval()\nfast = torch.compile(step)\npolicy.train(was_training)\n"
              "folder = args.dir\ntotal = np.trace(matrix)\n")  # fmt: skip
    assert leads(honest) == []


def test_hidden_code_loaders_and_weak_references_are_leads():
    # Round 16: exec reached through a YAML document, modules loaded from an archive or a
    # folder, and the probes' records reached through a WeakKeyDictionary's callback
    # (weakref.getweakrefs(optimizer)): 25.7 -> 44 of 44 and 40.3 -> 52 of 52, none a lead.
    hidden = """run = yaml.unsafe_load("!!python/name:builtins.exec")
import zipimport
import site
from torch.utils.cpp_extension import load_inline
torch.ops.load_library(path)
owner = link.__callback__.__defaults__[0]()
links = weakref.getweakrefs(optimizer)
import yaml
"""
    assert sorted({lead.line for lead in leads(hidden)}) == [2, 3, 4, 5, 6, 7, 8]
    # Round 17: text run as an annotation (singledispatch's register and eval_str evaluate
    # it), and a base class's step called on the probe's optimizer, which skips its record.
    evaluated = """@functools.singledispatch
def kind(value): ...
parameters = inspect.signature(typed, eval_str=True)
type(optimizer).mro()[-3].step(optimizer)
torch.optim.lr_scheduler.LambdaLR.step(scheduler)
raw = SGD.step.__wrapped__
optimizer._optimizer_step_pre_hooks.clear()
seen = scheduler.lr_lambdas[0].__closure__[0].cell_contents
optimizer.step()
super().step()
"""
    assert sorted({lead.line for lead in leads(evaluated)}) == [1, 3, 4, 5, 6, 7, 8]
    # Round 18: text that generated code takes as names (a dataclass's field names given in a
    # class body's __annotations__), and a template engine that calls what its text names.
    generated = """class Row:
    __annotations__ = {column: int}
Row = dataclasses.make_dataclass("Row", [(column, int)])
import jinja2
importlib.reload(_posixsubprocess)
@dataclasses.dataclass
class Honest:
    x: int
"""
    assert sorted({lead.line for lead in leads(generated)}) == [2, 3, 4, 5]


@pytest.mark.parametrize(
    "line",
    [
        '"%9999999999999s" % "="',  # MemoryError while folding the text
        '"{:9999999999999}".format("a")',
        '"{:>{}}".format("a", "9999999999")',
        '"{0.name}".format("group_stats")',  # AttributeError while folding
        '"abc"[' + "- " * 1500 + "1:]",  # RecursionError in a slice bound
    ],
)
def test_text_that_cannot_be_built_does_not_stop_the_scan(line):
    # Round 16: each of these, in a function never called, stopped `grpo-kit report` for the
    # whole class (MemoryError, AttributeError, RecursionError).
    assert leads(f"def label():\n    return {line}\n\nx = m.strict\n")[-1].line == 4
