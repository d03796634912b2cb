"""Problem: format and correctness rewards. Read README.md, then replace the bodies below."""

import re  # noqa: F401 - you may want it
from decimal import Decimal  # noqa: F401 - exact comparison of decimal numbers


def format_reward(
    completions: list[str], think_reward: float = 0.5, answer_reward: float = 0.5
) -> list[float]:
    """Reward each completion for the well-formed parts of <think>...</think><answer>...</answer>.

    Args:
        completions: the generated texts (an entry that is not a str scores 0).
        think_reward: paid when the completion opens with one well-formed think block.
        answer_reward: paid when the completion closes with one well-formed answer block.

    Returns:
        One Python float per completion, in order.

    Raises:
        TypeError: if `completions` is a single string instead of a list.
    """
    raise NotImplementedError("format_reward is not implemented yet: write its body")


def correctness_reward(completions: list[str], answers: list, reward: float = 1.0) -> list[float]:
    """Pay `reward` where the number in the answer block equals the ground truth.

    Args:
        completions: the generated texts (an entry that is not a str scores 0).
        answers: one ground truth per completion: an int, a float (numpy's float32 too,
            read as the decimal it prints as) or a numeric string.
        reward: the reward of a correct answer; anything else gets 0.0.

    Returns:
        One Python float per completion, in order.

    Raises:
        TypeError: if `completions` is a single string instead of a list.
        ValueError: if completions and answers differ in length.
    """
    raise NotImplementedError("correctness_reward is not implemented yet: write its body")


def extract_answer(completion: str) -> str | None:
    """The content of the completion's one well-formed <answer> block, stripped; else None."""
    raise NotImplementedError("extract_answer is not implemented yet: write its body")
