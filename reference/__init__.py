"""Reference solutions of the grpo-kit problems, and the trainer built on them.

Each module reference/<slug>.py solves problems/<slug>; the trainer imports these modules
rather than restating any formula.
"""
