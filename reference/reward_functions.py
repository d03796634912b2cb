"""Reference solution: rule-based rewards for completions in the think/answer template.

    <think> reasoning </think> <answer> 42 </answer>

`format_reward` pays for each well-formed part of the template; `correctness_reward` pays when
the number inside <answer> equals the ground truth. A reward function is called on whatever the
policy generated, so neither ever raises on a malformed completion: it just scores 0.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Sequence
from decimal import Decimal

import numpy as np

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)

# A plain decimal number: optional sign, digits (commas only as thousands separators), optional
# fraction. ASCII digits only: r"\d" would also accept digits of other scripts.
NUMBER = re.compile(r"[+-]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")


def _block(text: str, open_tag: str, close_tag: str) -> tuple[int, int, str] | None:
    """(start, end, content) of the one well-formed open...close block of `text`, else None.

    Well-formed: each tag occurs exactly once, open before close, and the content holds some
    text and none of the template's tags (no nesting, no duplicates).
    """
    if text.count(open_tag) != 1 or text.count(close_tag) != 1:
        return None
    start, close = text.index(open_tag), text.index(close_tag)
    content = text[start + len(open_tag) : close]
    if close < start or not content.strip() or any(tag in content for tag in TAGS):
        return None
    return start, close + len(close_tag), content


def _think_matches(text: str) -> bool:
    """The completion opens (after whitespace) with one well-formed think block."""
    block = _block(text, THINK_OPEN, THINK_CLOSE)
    return block is not None and not text[: block[0]].strip()


def _answer_matches(text: str) -> bool:
    """The completion closes (before whitespace) with one well-formed answer block, preceded by
    nothing but whitespace, or by the end of a think block and whitespace."""
    block = _block(text, ANSWER_OPEN, ANSWER_CLOSE)
    if block is None or text[block[1] :].strip():
        return False
    before = text[: block[0]].rstrip()
    return not before or before.endswith(THINK_CLOSE)


def _check_completions(completions: Sequence) -> None:
    if isinstance(completions, str):
        raise TypeError("completions must be a list of strings, not one string: wrap it in [...]")


def format_reward(
    completions: list[str], think_reward: float = 0.5, answer_reward: float = 0.5
) -> list[float]:
    """think_reward for a well-formed leading think block, plus answer_reward for a well-formed
    closing answer block; 0 for a completion that is not a string."""
    _check_completions(completions)
    # Python floats before adding: np.float32(0.25) + 0.7 would add in float32.
    think_reward, answer_reward = float(think_reward), float(answer_reward)
    rewards = []
    for text in completions:
        if not isinstance(text, str):
            rewards.append(0.0)
            continue
        think = think_reward if _think_matches(text) else 0.0
        answer = answer_reward if _answer_matches(text) else 0.0
        rewards.append(think + answer)
    return rewards


def extract_answer(completion: str) -> str | None:
    """The stripped content of the completion's one well-formed answer block, else None."""
    if not isinstance(completion, str):
        return None
    block = _block(completion, ANSWER_OPEN, ANSWER_CLOSE)
    return None if block is None else block[2].strip()


def parse_number(text: str) -> Decimal | None:
    """The value of a plain decimal number such as "-3", "2.50" or "1,234"; None otherwise.

    Decimal, not float: "0.1" must equal 0.1 exactly, and large integers must not round.
    """
    text = text.strip()
    if not NUMBER.fullmatch(text):
        return None
    return Decimal(text.replace(",", ""))


def _target(answer) -> Decimal | None:
    """A ground truth given as an int, a float or a numeric string, as a Decimal."""
    if isinstance(answer, bool):  # True is an int in Python, but never a meant answer
        return None
    if isinstance(answer, numbers.Integral):
        return Decimal(int(answer))
    if isinstance(answer, (float, np.floating)):  # not any Real: a Fraction matches nothing
        # str() of a float is the shortest decimal that round-trips in the float's own
        # precision: "0.1" for 0.1, and for np.float32(0.1) too, whose float64 value is
        # 0.10000000149011612. Decimal(0.1) would be the binary value 0.1000000000000000055...
        value = Decimal(str(answer))
        return value if value.is_finite() else None
    if isinstance(answer, str):
        return parse_number(answer)
    return None


def correctness_reward(completions: list[str], answers: list, reward: float = 1.0) -> list[float]:
    """`reward` where the number in the answer block equals the ground truth, 0.0 elsewhere."""
    _check_completions(completions)
    if len(completions) != len(answers):
        raise ValueError(
            f"got {len(completions)} completions but {len(answers)} answers: "
            "give one ground-truth answer per completion"
        )
    rewards = []
    for completion, answer in zip(completions, answers, strict=True):
        extracted = extract_answer(completion)
        value = None if extracted is None else parse_number(extracted)
        target = _target(answer)
        correct = value is not None and target is not None and value == target
        rewards.append(float(reward) if correct else 0.0)
    return rewards
