"""The bar-chart task: its answer, the spans only the image determines, the rendered bars, the prompt set."""

import random

import pytest

from harness.data.bar_charts import (
    BarChart, COLORS, PROMPT, TEMPLATE, random_chart, render_chart, write_prompt_set,
)
from harness.analysis.vlm import image_determined_spans, image_determined_tokens
from harness.data.images import image_record
from harness.data.prompts import load_question_jsonl
from harness.errors import DraftcountError


def test_the_answer_and_its_image_determined_spans():
    chart = BarChart((("red", 5), ("cyan", 12 // 3)))
    answer = chart.answer()
    assert answer == 'bars = {"red": 5, "cyan": 4}\n' + TEMPLATE
    spans = image_determined_spans(answer)
    assert [answer[start:stop] for start, stop in spans] == ["red", "5", "cyan", "4"]
    assert image_determined_spans("total = 3\n" + answer) == []  # no literal first: nothing the image decides
    assert image_determined_tokens([(0, 4), (8, 10), (10, 13), (14, 16), (17, 18)], [(10, 13), (17, 18)]) == [
        False, False, True, False, True]
    for bad in [(), (("red", 0),), (("pink", 3),), tuple((colour, 1) for colour in list(COLORS)[:5])]:
        with pytest.raises(DraftcountError):
            BarChart(bad)


def test_bars_are_drawn_in_their_colour_and_length():
    chart = random_chart(random.Random(3))
    assert 2 <= len(chart.bars) <= 4 and len({colour for colour, _ in chart.bars}) == len(chart.bars)
    image = render_chart(chart)
    assert image.size == (64, 64)
    for row, (colour, length) in enumerate(chart.bars):
        middle = 16 * row + 8
        assert image.getpixel((8 * length - 1, middle)) == COLORS[colour]
        assert length == 8 or image.getpixel((8 * length, middle)) == (255, 255, 255)
        assert image.getpixel((0, 16 * row)) == (255, 255, 255)  # the gap above each bar
    assert len(chart.bars) == 4 or image.getpixel((0, 16 * len(chart.bars) + 8)) == (255, 255, 255)


def test_a_prompt_set_names_each_image_and_is_reproducible(tmp_path):
    path = write_prompt_set(tmp_path / "a", 5, seed=7)
    prompts = load_question_jsonl(path)
    assert len(prompts) == 5 and all(prompt.turns == (PROMPT,) and prompt.category == "bar_chart" for prompt in prompts)
    assert prompts[2].image == str(tmp_path / "a" / "images" / "chart-002.png")
    again = load_question_jsonl(write_prompt_set(tmp_path / "b", 5, seed=7))
    assert [image_record(p.image)["sha256"] for p in prompts] == [image_record(p.image)["sha256"] for p in again]
    with pytest.raises(DraftcountError, match="at least one prompt"):
        write_prompt_set(tmp_path / "c", 0, seed=7)
