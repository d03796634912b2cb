"""Run a student's code in a sandbox and bring back only plain data.

The trusted side (pytest running the hidden tests) never runs student code and never hands it
an object: each request (call a function, or run one of the problem's probes beside it) goes
to a sandboxed process as plain data, and only plain data comes back, decoded with limits.

    submission.py   the ``sandbox:<path>`` implementation the tests call (a loader Runner)
    forkserver.py   the grader's side of the fork servers: a process per student, deadlines
    bwrap.py        the bubblewrap command line: what a sandbox can see and do
    frames.py       length-prefixed JSON messages, read by the grader within deadlines
    zygote.py       the fork server inside the sandbox: forks, drops privileges, sets limits
    limits.py       the resource limits a student's process sets on itself
    child.py        a student's process: import the submission, serve requests

The sandboxed side (zygote, child, limits, frames) imports none of the trusted modules, only
the code both sides share (grader.values, grader.execution, grader.errors).
"""
