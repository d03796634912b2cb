"""Leads for the instructor: code in a submission that reaches into the grader or out of its process.

The tests judge what a submission's process sends back. Values (log-probs, weights, rewards)
can only come out right from working code, but a few tests also read what a probe recorded in
that process: how a toy model was called, whether autograd was on. A file that edits those
records, patches the value encoder or walks up the stack to the probe's frames can claim
behaviour it does not have, and no test can see it. Its source shows it. Like the similarity
report, these are leads to read, not verdicts; the kit's own solutions give none.

The package: `rules` says what counts (tables of modules, attributes and builtins), `names`
follows a name back to the text it holds, `scan` walks a file's tree and lists its leads.
"""

from grader.tampering.scan import Lead, leads

__all__ = ["Lead", "leads"]
