"""Run a student's functions in a sandboxed child process and bring back only plain data.

The trusted side (pytest running the hidden tests) never imports student code. Each call of a
student function crosses a pipe to a child process that imported the submission under
bubblewrap and resource limits (see ``launch.py``); only validated plain data comes back
(``protocol.py``). ``proxy.py`` turns that into the ``impl`` object the tests receive::

    pytest problems/<slug> --impl sandbox:path/to/<slug>.py
"""
