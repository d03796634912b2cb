"""The statements' figures: each one a statement shows is drawn from the reference code."""

import pytest

from grader import figures
from grader.problems import all_problems

SHOWN = [
    (problem.slug, name)
    for problem in all_problems()
    for name in figures.linked_figures(problem.statement.read_text(encoding="utf-8"))
]


def test_every_figure_a_statement_shows_has_a_function_that_draws_it():
    assert set(SHOWN) == set(figures.FIGURES)
    assert len(SHOWN) >= 3


@pytest.mark.parametrize("slug, name", SHOWN, ids=[name for _, name in SHOWN])
def test_a_figure_is_the_same_svg_every_time_with_its_text_as_text(slug, name):
    svg = figures.render(slug, name)
    assert svg.startswith(b"<?xml") and b"<svg" in svg
    assert b"<text" in svg  # labels stay text: sharp, small, searchable
    assert svg == figures.render(slug, name)  # no date, no random ids: a stable build
