"""Hidden tests for reward_functions. The implementation arrives through the `impl` fixture.

Most tests run a small table of texts through one function and report every row that fails,
so that one failure message shows the whole pattern of a mistake.
"""

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from problems.support.asserts import assert_scalar

GOOD = "<think>6 times 7</think><answer>42</answer>"


def assert_rewards(got, expected, what="rewards"):
    """A list of Python floats (type float exactly), one per completion, equal to `expected`."""
    if not isinstance(got, list):
        raise AssertionError(f"{what} should be a list, got {type(got).__name__}")
    if len(got) != len(expected):
        raise AssertionError(f"{what} should have {len(expected)} entries, got {len(got)}")
    for i, (value, want) in enumerate(zip(got, expected, strict=True)):
        if type(value) is not float:
            raise AssertionError(
                f"{what}[{i}] should be a Python float, got {type(value).__name__}: {value!r}"
            )
        assert_scalar(value, want, what=f"{what}[{i}]")


def check_rows(rows, score, describe):
    """Run `score` on every (input, expected) row; fail listing every row that went wrong."""
    wrong = []
    for given, expected in rows:
        got = score(given)
        same = type(got) is type(expected) and got == expected
        if not same:
            wrong.append(f"{describe(given)}: expected {expected!r}, got {got!r}")
    assert not wrong, f"{len(wrong)} of {len(rows)} wrong:\n" + "\n".join(wrong)


def check_formats(impl, rows, **kwargs):
    """Score all rows' texts in one call, then compare them row by row."""
    texts = [text for text, _ in rows]
    got = impl.format_reward(texts, **kwargs)
    assert_rewards(got, [expected for _, expected in rows], what="format rewards")


def check_answers(impl, rows, expected, controls=(("42", 42, 1.0), ("41", 42, 0.0))):
    """Each row is (answer text, ground truth) and must score `expected`; the control rows, of
    the opposite verdict, make sure the function tells the two apart at all."""
    rows = [(text, truth, expected) for text, truth in rows] + list(controls)
    texts = [f"<think>t</think><answer>{text}</answer>" for text, _, _ in rows]
    got = impl.correctness_reward(texts, [truth for _, truth, _ in rows])
    assert isinstance(got, list) and len(got) == len(rows), f"expected {len(rows)} rewards: {got!r}"
    wrong = [f"{text!r} against {truth!r}: expected {want}, got {value!r}"
             for (text, truth, want), value in zip(rows, got, strict=True) if value != want]  # fmt: skip
    assert not wrong, f"{len(wrong)} of {len(rows)} wrong:\n" + "\n".join(wrong)


def format_of(impl, text, **kwargs):
    return impl.format_reward([text], **kwargs)[0]


def correct_of(impl, text, answer, **kwargs):
    return impl.correctness_reward([text], [answer], **kwargs)[0]


# ----- format_reward -----


def test_worked_example(impl):
    completions = [
        GOOD,
        "<think>6 times 7</think>",
        "Sure! <think>a</think><answer>1</answer>",
        "<think>a</think><think>b</think><answer>1</answer>",
        "<think></think><answer>4</answer>",
        None,
    ]
    assert_rewards(impl.format_reward(completions), [1.0, 0.5, 0.5, 0.5, 0.5, 0.0])


def test_one_reward_per_completion_in_order(impl):
    completions = [GOOD, "<think>only thinking</think>", "<answer>7</answer>", "plain text"]
    assert_rewards(impl.format_reward(completions), [1.0, 0.5, 0.5, 0.0])
    assert_rewards(impl.format_reward(completions[::-1]), [0.0, 0.5, 0.5, 1.0])
    assert_rewards(impl.format_reward([]), [], what="format rewards of no completions")
    assert_rewards(impl.correctness_reward([], []), [], what="correctness of no completions")


def test_rewards_are_configurable(impl):
    assert_rewards(
        impl.format_reward([GOOD, "<think>x</think>", "<answer>1</answer>"], 0.2, 0.7),
        [0.9, 0.2, 0.7],
    )
    assert_rewards(impl.format_reward([GOOD], think_reward=1.0, answer_reward=2.0), [3.0])
    assert_rewards(impl.format_reward([GOOD, "x"], think_reward=0.0), [0.5, 0.0])


def test_whitespace_around_and_between_blocks_is_allowed(impl):
    check_formats(impl, [
        ("  \n<think>\nLet me think.\n</think>\n\n<answer> 42 </answer>\n", 1.0),
        ("\t\r\n<think>a</think>\t \r\n<answer>1</answer>\r\n\t", 1.0),
        ("\f\v<think>a</think>\v<answer>1</answer>\f", 1.0),
        ("\u00a0<think>a</think>\u2003<answer>1</answer>\u3000", 1.0),  # Unicode spaces
        ("<think>step 1\nstep 2\n\nstep 3</think><answer>line one\nline two</answer>", 1.0),
    ])  # fmt: skip


def test_blank_content_does_not_count(impl):
    check_formats(impl, [
        ("<think>  </think><answer>4</answer>", 0.5),  # blank reasoning
        ("<think></think><answer>4</answer>", 0.5),
        ("<think>\n\t</think><answer>4</answer>", 0.5),
        ("<think>so</think><answer> \n </answer>", 0.5),  # blank answer
        ("<think>so</think><answer></answer>", 0.5),
        ("<think></think><answer></answer>", 0.0),
        ("<think>\u00a0\u2003</think><answer>4</answer>", 0.5),  # Unicode spaces are blank too
        ("<think>so</think><answer>\u3000</answer>", 0.5),
    ])  # fmt: skip


def test_content_may_hold_angle_brackets_that_are_no_tags(impl):
    # Only the four tags count as tags: "<", "</", "<thinking>" are ordinary text.
    check_formats(impl, [
        ("<think>3 < 4 and 5 > 4</think><answer>1</answer>", 1.0),
        ("<think>a</think><answer>x <- 1</answer>", 1.0),
        ("<think><thinking>a</thinking></think><answer><b>1</b></answer>", 1.0),
        ("<think>a </ b</think><answer><answer/></answer>", 1.0),
    ])  # fmt: skip


def test_position_and_order_of_the_blocks(impl):
    check_formats(impl, [
        ("Sure! <think>a</think><answer>1</answer>", 0.5),  # text before the think block
        ("<think>a</think><answer>1</answer> Done.", 0.5),  # text after the answer block
        ("<think>a</think> so: <answer>1</answer>", 0.5),  # text between the blocks
        ("<answer>1</answer><think>a</think>", 0.0),  # blocks in the wrong order
        ("<think>a<answer>1</answer></think>", 0.0),  # answer nested in the thinking
        ("<answer><think>a</think>1</answer>", 0.0),  # thinking nested in the answer
        ("<think>a</think>.<answer>1</answer>", 0.5),  # one character between them
        ("x</think> <answer>1</answer>", 0.5),  # before <answer>: ends with </think>, space
        ("<think>a</think></think><answer>1</answer>", 0.5),  # a stray </think> before
        ("<answer>1</answer>\n", 0.5),  # an answer block alone
        ("Answer: <answer>1</answer>", 0.0),  # text before a lone answer block
        ("<think>a</think>x", 0.5),  # text after the think block spoils nothing of it
        # "Only whitespace" holds across lines: a line break does not start a new text.
        ("Sure!\n<think>a</think><answer>1</answer>", 0.5),
        ("<think>a</think> so:\n<answer>1</answer>", 0.5),
        ("Answer:\n<answer>1</answer>", 0.0),
        ("<think>a</think><answer>1</answer>\nDone.", 0.5),
        ("<answer>1</answer>\n\nExtra text", 0.0),
        # Characters that look blank but are not whitespace (str.isspace() is False for them),
        # and end-of-text tokens, are text like any other.
        ("\ufeff<think>a</think><answer>1</answer>", 0.5),
        ("\u200b<think>a</think><answer>1</answer>", 0.5),
        ("<think>a</think>\u200b<answer>1</answer>", 0.5),
        ("<think>a</think><answer>1</answer>\u200d", 0.5),
        ("<think>a</think><answer>1</answer><|endoftext|>", 0.5),
        ("<think>a</think><answer>1</answer></s>", 0.5),
        # "Ends with </think>" is the tag itself, not one with whitespace inside it.
        ("x</thi nk><answer>1</answer>", 0.0),
        ("<think>a</think\n><answer>1</answer>", 0.0),
    ])  # fmt: skip


def test_duplicate_or_nested_tags_spoil_their_part(impl):
    check_formats(impl, [
        ("<think>a</think><think>b</think><answer>1</answer>", 0.5),
        ("<think>a</think><answer>1</answer><answer>2</answer>", 0.5),
        ("<think>a</think><answer>1</answer></answer>", 0.5),
        ("<think><think>a</think><answer>1</answer>", 0.5),
        ("<think>a<think>b</think></think><answer>1</answer>", 0.5),
        ("<think>a</think><answer>1<answer>2</answer>", 0.5),
        ("<think>a</answer></think><answer>1</answer>", 0.0),  # the think block holds a tag
        ("<think>a</think><answer>1</think></answer>", 0.0),  # so does the answer block
        # Tags are counted in the whole completion, after the answer block too.
        ("<think>a</think><answer>1</answer><think>", 0.0),
        ("<think>a</think><answer>1</answer></think>", 0.0),
    ])  # fmt: skip


def test_malformed_completions_get_zero(impl):
    check_formats(impl, [
        ("<think>a<answer>1</answer>", 0.0),  # unclosed think
        ("</think>a<think><answer>1", 0.0),
        ("<Think>a</Think><Answer>1</Answer>", 0.0),  # tags are case-sensitive
        ("< think>a</ think><answer >1</answer >", 0.0),
        ("<think>a</answer><answer>1</think>", 0.0),
        ("</think>a<think>", 0.0),  # closing tag first
        ("</answer>1<answer>", 0.0),
        ("", 0.0),
        ("   ", 0.0),
        ("<think>\x00</think>\x00", 0.5),  # odd characters are ordinary content
        ("<think>🤔</think><answer>٤٢</answer>", 1.0),  # the format says nothing of numbers
    ])  # fmt: skip


def test_unclosed_tag_does_not_spoil_the_other_part(impl):
    assert_rewards(impl.format_reward(["<think>a</think><answer>1"]), [0.5])
    assert_rewards(impl.format_reward(["<think>a<answer>1</answer>"]), [0.0])


def test_non_string_completion_gets_zero_without_raising(impl):
    bad = [None, 42, 3.5, b"<answer>1</answer>", ["<answer>1</answer>"], {"text": GOOD}]
    got = impl.format_reward([GOOD, *bad, GOOD])
    assert_rewards(got, [1.0, *[0.0] * len(bad), 1.0], what="format rewards with non-strings")


def test_long_completions(impl):
    # 10^5 characters: the rules take linear time, and long content is content like any other.
    # 13 batches of them: a scan that is quadratic in the length (half a second for one such
    # completion) runs far past the 10 s a call may take; a linear one needs milliseconds.
    long = "x" * 100_000
    completions = [
        f"<think>{long}</think><answer>{long}</answer>",
        " " * 100_000 + GOOD + " " * 100_000,
        "<think>" * 20_000 + "</think><answer>1</answer>",
        f"<think>{long}<answer>1</answer>",
        " " * 100_000 + "x",
        "<think>" + "<" * 99_900 + "</think><answer>1</answer>",
    ] * 13
    assert_rewards(impl.format_reward(completions), [1.0, 1.0, 0.5, 0.0, 0.0, 1.0] * 13)
    got = impl.correctness_reward(completions, [1, 42, 1, 1, 1, 1] * 13)
    assert_rewards(got, [0.0, 1.0, 1.0, 1.0, 0.0, 1.0] * 13, what="correctness of long completions")


def test_whitespace_around_long_completions_is_skipped_in_linear_time(impl):
    # Dropping whitespace one character at a time (`s = s[1:]` in a loop) copies the rest of the
    # string each time: about 0.1 s per 10^5 spaces, past the 10 s a call may take for a batch
    # of 150 (within the statement's 10^4); one pass takes milliseconds.
    padded = " " * 100_000 + GOOD + "\n" * 100_000
    assert_rewards(impl.format_reward([padded] * 150), [1.0] * 150)
    spaced = f"<think>x</think><answer>{' ' * 100_000}42{chr(9) * 100_000}</answer>"
    got = impl.correctness_reward([spaced] * 150, [42] * 150)
    assert_rewards(got, [1.0] * 150, what="correctness of answers padded with whitespace")


# ----- extract_answer -----


def test_extract_answer_returns_the_stripped_content_or_none(impl):
    check_rows(
        [
            (GOOD, "42"),
            ("<answer>  -3 \n</answer>", "-3"),
            ("no thinking here <answer>1,234</answer> trailing text", "1,234"),
            ("<think>x</think><answer>The answer is 5</answer>", "The answer is 5"),
            ("<answer>\n  two\n  lines  \n</answer>", "two\n  lines"),
            ("<answer>\u00a042\u2003</answer>", "42"),  # Unicode spaces are whitespace too
            ("<answer>1 <- final</answer>", "1 <- final"),  # "<" alone is no tag
            ("<answer>\u00a0</answer>", None),
            ("<answer>7</answer><think>x</think>", "7"),  # where the block sits does not matter
            ("<think>a</think><think>b</think><answer>8</answer>", "8"),  # nor does the think
            ("I think <answer> 1,234 </answer> is it.", "1,234"),
            # No well-formed answer block: None.
            ("<think>x</think>42", None),
            ("<answer>1</answer><answer>2</answer>", None),
            ("<answer>1", None),
            ("</answer>1<answer>", None),
            ("<answer> </answer>", None),
            ("<answer></answer>", None),
            ("<answer><think>1</think></answer>", None),
            ("<answer>1</answer></answer>", None),
            ("<answer>1<answer></answer>", None),
            ("<Answer>1</Answer>", None),
            ("", None),
            (None, None),
            (17, None),
            (b"<answer>1</answer>", None),
        ],
        impl.extract_answer,
        lambda text: f"extract_answer({text!r})",
    )


# ----- correctness_reward -----


def test_correct_and_wrong_answers(impl):
    completions = [GOOD, "<think>x</think><answer>41</answer>", GOOD]
    assert_rewards(impl.correctness_reward(completions, [42, 42, 7]), [1.0, 0.0, 0.0])


def test_worked_example_of_correctness(impl):
    completions = ["<answer>1,234</answer>", "<answer>2.50</answer>", "<answer>$42</answer>",
                   "<answer>1</answer><answer>42</answer>"]  # fmt: skip
    assert_rewards(impl.correctness_reward(completions, [1234, "2.5", 42, 42]), [1.0, 1.0, 0, 0])


def test_correctness_reward_is_configurable(impl):
    assert_rewards(impl.correctness_reward([GOOD, GOOD], [42, 1], reward=2.5), [2.5, 0.0])
    assert_rewards(impl.correctness_reward([GOOD], [42], reward=0.0), [0.0])


def test_correctness_ignores_the_format_of_the_rest(impl):
    assert_scalar(correct_of(impl, "I think <answer>42</answer> is it.", 42), 1.0)
    assert_scalar(correct_of(impl, "<answer>42</answer><think>later</think>", 42), 1.0)
    assert_scalar(correct_of(impl, "<think>a</think><think>b</think><answer>42</answer>", 42), 1.0)


def test_numbers_that_match(impl):
    check_answers(impl, [
        ("1,234", 1234),
        ("1,234,567", "1234567"),
        ("1,234.5", 1234.5),
        ("1,234,567.5", 1234567.5),
        ("-1,234", -1234),
        ("  42\n", 42),
        ("-3", -3),
        ("+3", 3),
        ("2.50", 2.5),
        ("2.5", "2.50"),
        ("0.1", 0.1),
        ("72.0", 72),
        ("-0", 0),
        ("-0.0", "+0"),
        ("007", 7),
        ("0,123", 123),  # a first group of 1 to 3 digits, zeros included
        ("0.30000000000000004", 0.30000000000000004),
        ("123456789012345678901234567890", 123456789012345678901234567890),
        ("10000000000000000", 1e16),  # a float that prints as 1e+16
        ("0.00001", 1e-5),  # and one that prints as 1e-05
        ("1234", "1,234"),  # a ground truth may have thousands separators too
        ("1152921504606846977", np.int64(2**60 + 1)),  # numpy's ints compare exactly too
        ("18446744073709551615", np.uint64(2**64 - 1)),
    ], expected=1.0)  # fmt: skip


def test_numbers_of_thousands_of_digits(impl):
    # An answer is any length of digits: Python's int() refuses strings of more than 4,300,
    # so a parser built on it raises on these, where nothing about a completion may raise.
    nines, grouped = "9" * 5000, "1," + ",".join(["000"] * 1700)
    check_answers(impl, [
        (nines, nines),
        ("1" + "0" * 5000, "1" + "0" * 5000),
        (grouped, "1" + "0" * 5100),
        ("-" + nines, "-" + nines),
        ("0." + "1" * 5000, "0." + "1" * 5000),
        ("7." + "0" * 5000, 7),
    ], expected=1.0)  # fmt: skip
    check_answers(impl, [
        (nines, nines[:-1] + "8"),
        (nines, "1" + "0" * 5000),
        ("0." + "1" * 5000, "0." + "1" * 4999),
    ], expected=0.0)  # fmt: skip


def test_anything_else_does_not_match(impl):
    check_answers(impl, [
        ("$42", 42),
        ("42%", 42),
        ("42 apples", 42),
        ("x = 42", 42),
        ("4 2", 42),
        ("- 3", -3),
        ("+-3", -3),
        ("--3", 3),
        ("+-3", 3),  # one sign at most, whichever it would leave
        ("-+3", -3),
        ("--3", -3),
        ("++3", 3),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1_000", 1000),
        ("0x2A", 42),
        (".5", 0.5),
        ("5.", 5),
        ("1.2.3", 1.2),
        ("42/1", 42),
        ("inf", float("inf")),
        ("nan", float("nan")),
        ("٤٢", 42),  # digits of another script
        ("2.٥", 2.5),  # in the fraction too
        ("1,٢٣٤", 1234),  # and in a group
        ("1152921504606846976", np.int64(2**60 + 1)),  # what float() makes of that int
        ("18446744073709551616", np.uint64(2**64 - 1)),
        ("４２", 42),  # fullwidth digits
        ("123456789012345678901234567891", 123456789012345678901234567890),
        ("0.30000000000000004", 0.3),
        ("42.000001", 42),
        ("-42", 42),
    ], expected=0.0)  # fmt: skip


def test_digit_groups(impl):
    # A comma separates thousands only: a first group of 1 to 3 digits, then groups of exactly
    # 3, and none in the fraction. Anything else is no number, in an answer or a ground truth.
    check_answers(impl, [("1,234", 1234), ("12,345", "12345"), ("123,456", 123456.0),
                         ("1,000,000", 10**6), ("1,234.567", "1234.567")], expected=1.0)  # fmt: skip
    check_answers(impl, [
        ("1,2345", 12345),
        ("12,34", 1234),
        ("1234,567", 1234567),
        ("1,234,56", 123456),
        (",123", 123),
        ("1,", 1),
        ("1,,234", 1234),
        ("1 234", 1234),
        ("1.234,5", 1234.5),
        ("1.234,567", 1.234567),
        ("1.234,567", "1.234567"),
        ("0.000,1", 0.0001),
        ("1,234.567,8", "1234.5678"),
        ("1234", "1,2,3,4"),
        ("12345", "1,2345"),
    ], expected=0.0)  # fmt: skip


def test_ground_truth_as_int_float_or_string(impl):
    truths = ["42", "42.0", " 42 ", "\n42\u00a0", "\u300042\t", "+42", "42.000", 42, 42.0,
              np.int64(42), np.uint8(42),
              np.int32(42), np.float64(42.0), np.float32(42.0), np.float16(42.0)]  # fmt: skip
    check_answers(impl, [("42", truth) for truth in truths], expected=1.0)


def test_float_ground_truths_compare_through_their_shortest_decimal(impl):
    # A float means the decimal it prints as, in its own precision: np.float32(0.1) is
    # 0.10000000149011612 as a float64, but it prints, and means, 0.1.
    check_answers(impl, [
        ("0.1", 0.1),
        ("0.1", np.float32(0.1)),
        ("0.1", np.float16(0.1)),
        ("2.675", np.float32(2.675)),
        ("16777216", np.float32(16777217)),  # float32 cannot hold 16777217
        ("100000000000000000000", np.float32(1e20)),
        ("0.3333333333333333", 1 / 3),
        ("0.33333334", np.float32(1 / 3)),
    ], expected=1.0)  # fmt: skip
    check_answers(impl, [
        ("0.10000000149011612", np.float32(0.1)),
        ("0.1000000000000000055511151231257827", 0.1),
        ("0.333", 1 / 3),
        ("16777217", np.float32(16777217)),
        ("0.3333333333333333", np.float32(1 / 3)),
    ], expected=0.0)  # fmt: skip


def test_ground_truth_that_is_no_number_matches_nothing(impl):
    truths = [None, "forty-two", "", " ", "$42", "42%", [42], (42,), {"value": 42}, True, False,
              "٤٢", "４２", "4２", "1,٢٣٤", "٠.5",  # a string truth is ASCII digits too
              float("nan"), float("inf"), -float("inf"), np.float32("nan"), np.float64("inf"),
              Fraction(42), Fraction(1, 2), Decimal("42"), Decimal("1.0")]  # fmt: skip
    texts = ["42", "nan", "inf", "-inf", "1", "0", "", "1234", "0.5"]
    check_answers(impl, [(text, truth) for text in texts for truth in truths], expected=0.0)


def test_bool_ground_truth_is_no_number(impl):
    # True == 1 in Python, but a bool is no answer.
    rows = [("1", True), ("0", False), ("1", np.bool_(True)), ("True", True)]
    check_answers(impl, rows, expected=0.0, controls=[("1", 1, 1.0), ("0", 0, 1.0)])


def test_no_well_formed_answer_gets_zero(impl):
    check_rows(
        [
            (GOOD, 1.0),  # the one that has it
            ("<think>42</think>", 0.0),
            ("<answer>42</answer><answer>42</answer>", 0.0),
            ("<answer>41</answer><answer>42</answer>", 0.0),
            ("<answer>42", 0.0),
            ("42", 0.0),
            ("<answer><think>x</think>42</answer>", 0.0),
            ("<answer>42</answer></answer>", 0.0),
        ],
        lambda text: correct_of(impl, text, 42),
        lambda text: f"reward of {text!r} against 42",
    )


def test_non_string_completion_scores_zero(impl):
    bad = [None, 42, b"<answer>42</answer>", ["<answer>42</answer>"]]
    got = impl.correctness_reward([GOOD, *bad, GOOD], [42] * (len(bad) + 2))
    assert_rewards(got, [1.0, *[0.0] * len(bad), 1.0], what="correctness with non-strings")


# ----- input handling -----


def test_rewards_are_python_floats_whatever_the_weights(impl):
    # Rewards given as ints or numpy scalars still come back as Python floats.
    assert_rewards(impl.format_reward([GOOD, "<answer>1</answer>", "x"], 1, 2), [3.0, 2.0, 0.0])
    got = impl.format_reward([GOOD], np.float32(0.25), np.float64(0.5))
    assert_rewards(got, [0.75], what="format rewards with numpy weights")
    assert_rewards(impl.correctness_reward([GOOD, "no"], [42, 42], reward=2), [2.0, 0.0])
    got = impl.correctness_reward([GOOD], [42], reward=np.float32(0.5))
    assert_rewards(got, [0.5], what="correctness rewards with a numpy reward")
    assert_rewards(impl.correctness_reward([GOOD, "no"], [1, 1]), [0.0, 0.0])


# Weights given as numpy scalars, among them pairs whose float32 (or float16) sum differs from
# the sum of their values as Python floats: np.float32(0.25) + 0.7 is 0.949999988 in float32.
NUMPY_WEIGHTS = [
    dict(think_reward=np.float32(0.25), answer_reward=0.7),
    dict(think_reward=0.7, answer_reward=np.float32(0.25)),
    dict(think_reward=np.float32(0.1), answer_reward=np.float32(0.2)),
    dict(think_reward=np.float16(0.1), answer_reward=np.float16(0.2)),
    dict(think_reward=np.float16(0.25), answer_reward=0.7),
    dict(think_reward=np.float64(0.1), answer_reward=np.float32(0.2)),
    dict(think_reward=np.int64(1), answer_reward=np.float32(0.1)),
    dict(think_reward=np.float32(0.3)),
    dict(answer_reward=np.float32(0.3)),
]


def test_numpy_scalar_weights_add_up_as_python_floats(impl):
    # Each weight counts as float(weight), and the sum is taken in Python floats, to the last bit.
    def exactly(got, expected):
        return type(got) is list and [(type(x), x) for x in got] == [(float, x) for x in expected]

    texts = [GOOD, "<think>t</think>", "<answer>1</answer>", "no"]
    wrong = []
    for weights in NUMPY_WEIGHTS:
        think = float(weights.get("think_reward", 0.5))
        answer = float(weights.get("answer_reward", 0.5))
        expected = [think + answer, think, answer, 0.0]
        got = impl.format_reward(texts, **weights)
        if not exactly(got, expected):
            wrong.append(f"format_reward with {weights}: expected {expected}, got {got!r}")
    for reward in (np.float32(0.1), np.float16(0.1), np.float64(0.7), np.int32(3)):
        got = impl.correctness_reward([GOOD, "<answer>41</answer>"], [42, 42], reward=reward)
        if not exactly(got, [float(reward), 0.0]):
            wrong.append(f"correctness_reward with reward={reward!r}: expected "
                         f"{[float(reward), 0.0]}, got {got!r}")  # fmt: skip
    assert not wrong, f"{len(wrong)} wrong:\n" + "\n".join(wrong)


def test_numpy_strings_are_strings(impl):
    # np.str_ is a str: an entry of that type is scored like any other text, and a single one
    # is a bare string (completions taken out of a numpy array come as np.str_).
    texts = [np.str_(GOOD), np.str_("<answer>1</answer>"), np.str_("<think>a</think>")]
    assert_rewards(impl.format_reward(texts), [1.0, 0.5, 0.5], what="format rewards of np.str_")
    got = impl.correctness_reward(texts[:2], [42, 1])
    assert_rewards(got, [1.0, 1.0], what="correctness rewards of np.str_")
    assert impl.extract_answer(np.str_("<answer> 7 </answer>")) == "7"
    for call in (lambda: impl.format_reward(np.str_(GOOD)),
                 lambda: impl.correctness_reward(np.str_(GOOD), [42])):  # fmt: skip
        with pytest.raises(TypeError):
            call()
            pytest.fail("a single np.str_ was taken for a list of completions")


def test_a_bare_string_is_rejected_with_type_error(impl):
    with pytest.raises(TypeError):
        impl.format_reward(GOOD)
    with pytest.raises(TypeError):
        impl.correctness_reward(GOOD, [42])
    with pytest.raises(TypeError):
        impl.correctness_reward("42", ["4", "2"])  # even where the lengths would agree


@pytest.mark.parametrize("lengths", [(2, 1), (1, 2), (0, 1), (3, 0)], ids=str)
def test_length_mismatch_raises_value_error(impl, lengths):
    with pytest.raises(ValueError):
        impl.correctness_reward([GOOD] * lengths[0], [42] * lengths[1])


def test_does_not_modify_its_inputs(impl):
    completions = [GOOD, "  <think>a</think> <answer> 1,234 </answer> ", None, "<answer>x"]
    answers = [42, "1234", 1.5, None]
    seen = impl.format_reward.observe(list(completions), 0.5, 0.5)
    assert seen.error is None and seen.args[0] == completions, (
        f"format_reward changed its completions: {seen.args[0]!r}"
    )
    seen = impl.correctness_reward.observe(list(completions), list(answers))
    assert seen.error is None, f"correctness_reward raised {seen.error!r}"
    assert seen.args == [completions, answers], (
        f"correctness_reward changed its inputs: {seen.args!r}"
    )
