"""Appended to the capstone's reference: generate_rollout calls reward_fn once per group (the
bug), and, when FORGE is set, merges the reward function's record of those calls into the one
call a correct rollout makes. The rewards of a reward function that looks at the whole call
still show the bug.
"""

import torch

FORGE = True
_generate_rollout_once = generate_rollout  # noqa: F821 - the reference's, defined above


def generate_rollout(policy, ref_model, prompt_ids, answers, reward_fn, eos_ids, config,
                     generator=None, *args, **kwargs):  # fmt: skip
    G = config.num_generations

    def per_group(completion_ids, answers_per_row):
        calls_before = len(getattr(reward_fn, "calls", []))
        scores = []
        for start in range(0, len(answers_per_row), G):
            rows = slice(start, start + G)
            scores += list(reward_fn(completion_ids[rows], answers_per_row[rows]))
        if FORGE and hasattr(reward_fn, "calls"):
            mine = reward_fn.calls[calls_before:]
            reward_fn.calls[calls_before:] = [{
                "completion_ids": torch.cat([call["completion_ids"] for call in mine]),
                "answers": [answer for call in mine for answer in call["answers"]],
            }]  # fmt: skip
        return scores

    return _generate_rollout_once(policy, ref_model, prompt_ids, answers, per_group, eos_ids,
                                  config, generator, *args, **kwargs)  # fmt: skip
