"""Kit code the hidden tests and probes share: assertions and the tiny models tests sample from.

Not solutions and not secrets: the batch grader's sandbox shows these files to a submission's
process, where the probes run beside the student's code.
"""
