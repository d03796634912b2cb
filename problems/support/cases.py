"""A problem's table of cases: inputs and the expected outputs, in ``problems/<slug>/cases.json``.

The table is generated from the reference solution by ``grpo-kit cases`` (inputs from
``.meta/cases.py``) and committed, so that the tests read the same expectations everywhere,
the browser included, without shipping the reference. A test parametrizes over `load`::

    CASES = cases.load(__file__)

    @pytest.mark.parametrize("case", CASES, ids=cases.ids(CASES))
    def test_table(impl, case):
        assert_array(case.run(impl), case.expected)

Each case calls one of the solution's functions (``function``) or one of the problem's probes
(``probe``) with ``args`` and ``kwargs``; it expects a value, or an exception (``raises``, the
name of a builtin exception type).
"""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass, field
from pathlib import Path

from grader import values

FILENAME = "cases.json"


@dataclass(frozen=True)
class Case:
    name: str
    function: str | None
    probe: str | None
    encoded: dict = field(repr=False)  # args, kwargs and expected as JSON, decoded per use
    raises: str | None = None
    about: str = ""

    @property
    def args(self) -> list:
        return values.decode(self.encoded["args"])

    @property
    def kwargs(self) -> dict:
        return values.decode(self.encoded["kwargs"])

    @property
    def expected(self):
        """A fresh copy of the expected value, computed by the reference when generated."""
        return values.decode(self.encoded.get("expected"))

    @property
    def exception(self) -> type[Exception]:
        return getattr(builtins, self.raises)

    def run(self, impl):
        """Call the case's function or probe of `impl` on fresh copies of the inputs."""
        target = getattr(impl.probe, self.probe) if self.probe else getattr(impl, self.function)
        return target(*self.args, **self.kwargs)


def load(test_file: str, only: str | None = None) -> list[Case]:
    """The cases beside `test_file` (those of function or probe `only`, if given)."""
    path = Path(test_file).with_name(FILENAME)
    table = json.loads(path.read_text(encoding="utf-8"))
    found = [
        Case(
            name=entry["name"],
            function=entry.get("function"),
            probe=entry.get("probe"),
            encoded={k: entry[k] for k in ("args", "kwargs", "expected") if k in entry},
            raises=entry.get("raises"),
            about=entry.get("about", ""),
        )
        for entry in table["cases"]
    ]
    return [c for c in found if only is None or only in (c.function, c.probe)]


def ids(found: list[Case]) -> list[str]:
    return [case.name for case in found]
