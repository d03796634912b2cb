"""A student's process: import one submission, then serve the grader's requests.

Forked by the fork server (``zygote.py``) after it has dropped privileges and set the limits.
The source arrives as text in the first request (``load``); every later request calls one of
its functions or one of the problem's probes through ``grader.execution``, exactly as a local
run does. Everything this process says is untrusted: the student's code runs here and may
rewrite any of it. The grader accepts only plain data from it and judges that data itself.
"""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
from pathlib import Path

from grader.errors import describe_exception
from grader.execution import Session, import_failure, load_file, load_source, solution_namespace
from grader.sandbox import frames
from grader.sandbox.confine import confine

# The kit's own packages: this process's grader (the session, the value encoder, the in-place
# check) and the probes' support (toy models).
KIT_PACKAGES = ("grader", "problems")


def _forget_kit_modules() -> None:
    """Take the kit's modules out of sys.modules before the submission runs.

    The objects in use keep working (they hold their modules), but no lookup by name reaches
    them: an import of "grader.execution" built at run time, or a resolver of dotted names
    (logging.config's, an entry point's, pkgutil's), gets a fresh copy that nothing uses, so
    patching it (execution._changed_arguments, values.encode) changes nothing.
    """
    for name in list(sys.modules):
        if name.split(".")[0] in KIT_PACKAGES:
            del sys.modules[name]
    # The fork server's main module holds its `main`, whose globals are the kit's modules in use.
    sys.modules["__main__"] = types.ModuleType("__main__")


def _load(request: dict, confined: bool) -> tuple[dict, Session | None]:
    slug, filename = str(request["slug"]), str(request["filename"])
    # The probes first: they import the kit's modules, which are then forgotten.
    probes_path = request.get("probes")
    probes = load_file(Path(probes_path), f"probes_{slug}") if probes_path else None
    _forget_kit_modules()
    # Its file where its __file__ says, in its own folder (the current one): read as it is
    # locally, where the file is the one the learner edits.
    source = str(request["source"])
    with contextlib.suppress(OSError):
        Path(filename).write_text(source, encoding="utf-8")
    if confined:
        confine(filename, source)
    try:
        module = load_source(source, f"solution_{slug}", filename)
    except BaseException as exc:  # noqa: BLE001 - importing a submission may raise anything
        return {"failed": import_failure(exc, filename)}, None
    solution = solution_namespace(module, list(request["names"]), filename)
    return {"loaded": True}, Session(solution, probes)


def serve(requests_fd: int, replies_fd: int, confined: bool = False) -> None:
    """Answer requests one at a time until the grader closes the pipe."""
    frames.write(replies_fd, {"ready": True})
    session = None
    # Each test starts from the same warning filters, as pytest has it locally: a filter the
    # solution set ("error") lasts until its test ends.
    test, filters = None, contextlib.ExitStack()
    while True:
        try:
            request = frames.read(requests_fd)
        except frames.Closed:
            return
        try:
            if request.get("op") == "load":
                reply, session = _load(request, confined)
            else:
                if request.get("test") != test:
                    test = request.get("test")
                    filters.close()
                    filters.enter_context(warnings.catch_warnings())
                reply, _ = session.execute(request)
        except BaseException as exc:  # noqa: BLE001 - the student's code may raise anything
            reply = {"error": describe_exception(exc)}
        reply["id"] = request.get("id")
        try:
            frames.write(replies_fd, reply)
        except ValueError as exc:  # larger than a frame may be
            frames.write(replies_fd, {"id": request.get("id"), "unsupported": str(exc)})
