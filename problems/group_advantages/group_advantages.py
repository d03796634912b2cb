"""Problem: group-relative advantages. Read README.md, then replace the body below."""

import numpy as np  # noqa: F401 - you will need it


def group_advantages(rewards, group_size, eps=1e-8, scale_by_std=True):
    """Return each completion's advantage relative to the other completions of its prompt.

    Args:
        rewards: 1-D rewards laid out group by group (each run of `group_size` consecutive
            values belongs to one prompt), or a 2-D array of shape (n_prompts, group_size).
        group_size: the number of completions sampled per prompt, G >= 1.
        eps: added to the group's sample standard deviation before dividing.
        scale_by_std: divide by (std + eps) when true; only subtract the mean when false.

    Returns:
        A float numpy array of the same shape as `rewards` (float rewards keep their dtype,
        others give float64). A group whose rewards are all equal (any group of size 1
        included) gets advantages of exactly 0.

    Raises:
        ValueError: if group_size is not a positive integer, the rewards do not split into
            groups of group_size, rewards is not 1-D or 2-D, or a reward is not finite.
    """
    raise NotImplementedError("group_advantages is not implemented yet: write its body")
