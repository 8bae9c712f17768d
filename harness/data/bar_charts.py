"""The vision-language task (issue 49): a rendered bar chart, answered with Python that uses its values.

The image (64 x 64 px) holds 2-4 horizontal bars, one per 16-px row, each in one of eight named colours and 1-8
units of 8 px long. The answer is a dict literal of the bars (colour -> length, top to bottom), then code around it
that is the same for every chart:

    bars = {"red": 5, "blue": 3}
    total = sum(bars.values())
    longest = max(bars, key=bars.get)
    for name, length in bars.items():
        print(name, length / total)

The colours and lengths in the dict literal can only come from the image (the *image-determined* tokens,
``harness.analysis.vlm.image_determined_spans``); the rest is predictable from the text before it. A key/value table rendered as text was tried first: a random-init 2-layer
vision tower learned no digit in 1300 steps on CPU (held-out digit accuracy 0.08-0.15, chance 0.1), while these bars
are read perfectly after about 350 steps (docs/vlm.md).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from harness.errors import DraftcountError

COLORS = {"red": (220, 30, 30), "green": (30, 170, 30), "blue": (30, 30, 220), "black": (0, 0, 0),
          "orange": (250, 150, 0), "purple": (150, 0, 200), "gray": (128, 128, 128), "cyan": (0, 200, 220)}
IMAGE_SIZE, ROW, UNIT, MAX_BARS, MAX_LENGTH = 64, 16, 8, 4, 8
PROMPT = "# the bar chart in the image, as Python\n"
CATEGORY = "bar_chart"
TEMPLATE = ("total = sum(bars.values())\nlongest = max(bars, key=bars.get)\nfor name, length in bars.items():\n"
            "    print(name, length / total)\n")


@dataclass(frozen=True)
class BarChart:
    """Bars top to bottom: (colour name, length in units)."""

    bars: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.bars) <= MAX_BARS:
            raise DraftcountError(f"a bar chart holds 1-{MAX_BARS} bars, not {len(self.bars)}")
        for colour, length in self.bars:
            if colour not in COLORS or not 1 <= length <= MAX_LENGTH:
                raise DraftcountError(f"bar ({colour!r}, {length}): colours are {', '.join(COLORS)}, lengths "
                                      f"1-{MAX_LENGTH}")

    def answer(self) -> str:
        literal = ", ".join(f'"{colour}": {length}' for colour, length in self.bars)
        return f"bars = {{{literal}}}\n{TEMPLATE}"


def random_chart(rng: random.Random) -> BarChart:
    """2-4 bars of distinct colours and lengths 1-8, drawn with ``rng``."""
    count = rng.randint(2, MAX_BARS)
    return BarChart(tuple((colour, rng.randint(1, MAX_LENGTH)) for colour in rng.sample(list(COLORS), count)))


def render_chart(chart: BarChart):
    """The chart as a 64 x 64 RGB image (PIL): white, each bar 12 px tall in its 16-px row."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), "white")
    draw = ImageDraw.Draw(image)
    for row, (colour, length) in enumerate(chart.bars):
        draw.rectangle([0, ROW * row + 2, UNIT * length - 1, ROW * row + ROW - 3], fill=COLORS[colour])
    return image


def write_prompt_set(out_dir: Path, count: int, seed: int) -> Path:
    """``count`` charts drawn with ``seed``: ``images/chart-NNN.png`` and ``question.jsonl`` (Spec-Bench's
    layout plus ``image`` and the reference answer). Returns the questions file."""
    if count < 1:
        raise DraftcountError(f"a bar-chart prompt set needs at least one prompt, not {count}")
    rng = random.Random(seed)
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for index in range(count):
        chart = random_chart(rng)
        name = f"images/chart-{index:03d}.png"
        render_chart(chart).save(out_dir / name)
        rows.append({"question_id": index, "category": CATEGORY, "turns": [PROMPT], "image": name,
                     "reference": [chart.answer()]})
    path = out_dir / "question.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
