"""Returns 4 MB of bytes, which a test's message would show as 16 MB of repr: written into
the student's records for every test, and read back by every rerun, unless messages are
capped."""


def grpo_objective(*args, **kwargs):
    return [b"\x00" * 1_000_000] * 4
