"""A student's process: import one submission, then serve the grader's requests.

Forked by the fork server (``zygote.py``) after it has dropped privileges and set the limits.
The source arrives as text in the first request (``load``); every later request calls one of
its functions or one of the problem's probes through ``grader.execution``, exactly as a local
run does. Everything this process says is untrusted: the student's code runs here and may
rewrite any of it. The grader accepts only plain data from it and judges that data itself.
"""

from __future__ import annotations

from pathlib import Path

from grader.errors import describe_exception
from grader.execution import Session, import_failure, load_file, load_source, solution_namespace
from grader.sandbox import frames


def _load(request: dict) -> tuple[dict, Session | None]:
    slug, filename = str(request["slug"]), str(request["filename"])
    try:
        module = load_source(str(request["source"]), f"solution_{slug}", filename)
    except BaseException as exc:  # noqa: BLE001 - importing a submission may raise anything
        return {"failed": import_failure(exc, filename)}, None
    probes_path = request.get("probes")
    probes = load_file(Path(probes_path), f"probes_{slug}") if probes_path else None
    solution = solution_namespace(module, list(request["names"]), filename)
    return {"loaded": True}, Session(solution, probes)


def serve(requests_fd: int, replies_fd: int) -> None:
    """Answer requests one at a time until the grader closes the pipe."""
    frames.write(replies_fd, {"ready": True})
    session = None
    while True:
        try:
            request = frames.read(requests_fd)
        except frames.Closed:
            return
        try:
            if request.get("op") == "load":
                reply, session = _load(request)
            else:
                reply, _ = session.execute(request)
        except BaseException as exc:  # noqa: BLE001 - the student's code may raise anything
            reply = {"error": describe_exception(exc)}
        reply["id"] = request.get("id")
        try:
            frames.write(replies_fd, reply)
        except ValueError as exc:  # larger than a frame may be
            frames.write(replies_fd, {"id": request.get("id"), "unsupported": str(exc)})
