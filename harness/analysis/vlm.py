"""The `vlm` study's view (issue 49): on bar charts (``harness.data.bar_charts``), which drafted tokens each method
gets accepted, split into the tokens only the image determines (the colours and lengths of the answer's dict
literal, ``image_determined_spans``) and the rest (the code around them), beside tau, the paired speedup, drafter
FLOPs and the tokens the drafter reads at prefill."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from harness.analysis.metrics import PREFILL_TOKENS
from harness.analysis.summary import records_frame, summarize
from harness.store.records import read_records

LITERAL = re.compile(r'"([a-z]+)": (\d+)')  # a bar chart's answer: "colour": length in its first line's literal


def image_determined_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of ``text`` that only the image determines: the colours and lengths of the first line's
    dict literal (a continuation that never wrote one has none)."""
    first = text.split("\n", 1)[0]
    if not first.startswith("bars = {"):
        return []
    return [span for match in LITERAL.finditer(first) for span in (match.span(1), match.span(2))]


def image_determined_tokens(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[bool]:
    """Per token (its character offsets in the text): whether it overlaps an image-determined span."""
    return [any(start < stop_span and begin < stop for begin, stop_span in spans) for start, stop in offsets]


def accepted_mask(step_accepted: list[int], new_tokens: int) -> list[bool]:
    """Per output token: whether it was an accepted draft (the prefill's token and each step's bonus token are the
    target's own), cut at the turn's end."""
    mask = [False]
    for accepted in step_accepted:
        mask += [True] * accepted + [False]
    return mask[:new_tokens]


def token_offsets(tokenizer, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The decoded text of ``ids`` and each token's character span in it."""
    text, offsets = "", []
    for index in range(len(ids)):
        start, text = len(text), tokenizer.decode(ids[: index + 1])
        offsets.append((start, len(text)))
    return text, offsets


def record_split(record: dict, tokenizer) -> dict[str, int]:
    """Image-determined and template tokens of one turn's output, and how many of each were accepted drafts."""
    ids = record["output_ids"]
    text, offsets = token_offsets(tokenizer, ids)
    image = image_determined_tokens(offsets, image_determined_spans(text))
    accepted = accepted_mask(record["counters"]["step_accepted"], len(ids))
    counts = {"image_tokens": 0, "image_accepted": 0, "template_tokens": 0, "template_accepted": 0}
    for is_image, was_accepted in zip(image, accepted):
        kind = "image" if is_image else "template"
        counts[f"{kind}_tokens"] += 1
        counts[f"{kind}_accepted"] += int(was_accepted)
    return counts


def split_frame(paths: list[Path], tokenizer) -> pd.DataFrame:
    """Per variant x temperature (method turns): the split's totals and the drafter's prefill tokens per turn."""
    rows = []
    for path in paths:
        for record in read_records(path):
            if record["role"] != "method":
                continue
            extra = record["counters"].get("extra", {})
            prefill = extra.get(PREFILL_TOKENS, record["prompt_tokens"] if record["models"].get("draft") else 0)
            rows.append({"variant": record.get("variant", record["method"]),
                         "temperature": record["sampling"]["temperature"], "drafter_prefill_tokens": prefill,
                         "prompt_tokens": record["prompt_tokens"], **record_split(record, tokenizer)})
    frame = pd.DataFrame(rows)
    totals = frame.groupby(["variant", "temperature"]).sum(numeric_only=True)
    turns = frame.groupby(["variant", "temperature"]).size()
    table = pd.DataFrame({
        "image_accepted_share": totals.image_accepted / totals.image_tokens.clip(lower=1),
        "template_accepted_share": totals.template_accepted / totals.template_tokens.clip(lower=1),
        "image_tokens": totals.image_tokens, "template_tokens": totals.template_tokens,
        "drafter_prefill_tokens": totals.drafter_prefill_tokens / turns, "prompt_tokens": totals.prompt_tokens / turns,
    })
    return table.reset_index()


def vlm_table(paths: list[Path], tokenizer) -> pd.DataFrame:
    """The study's table: the summary's tau, paired speedup and drafter FLOPs per step beside the split."""
    summary = summarize(records_frame(paths))[["variant", "temperature", "tau", "speedup_paired_mean",
                                                "speedup_ci_low", "speedup_ci_high", "drafter_flops_per_step",
                                                "tokens_per_s", "diverged_turns"]]
    return summary.merge(split_frame(paths, tokenizer), on=["variant", "temperature"], how="left")


def vlm_markdown(table: pd.DataFrame) -> str:
    header = ("| variant | T | tau | speedup [95% CI] | accepted: image-determined | accepted: template | "
              "drafter prefill tokens (of the prompt's) | drafter GFLOPs per step |\n| --- | --- | --- | --- | --- | "
              "--- | --- | --- |\n")
    lines = []
    for row in table.sort_values(["temperature", "variant"]).itertuples():
        lines.append(f"| {row.variant} | {row.temperature:g} | {row.tau:.2f} | {row.speedup_paired_mean:.2f} "
                     f"[{row.speedup_ci_low:.2f}, {row.speedup_ci_high:.2f}] | {row.image_accepted_share:.2f} of "
                     f"{int(row.image_tokens)} | {row.template_accepted_share:.2f} of {int(row.template_tokens)} | "
                     f"{row.drafter_prefill_tokens:.0f} ({row.prompt_tokens:.0f}) | "
                     f"{row.drafter_flops_per_step / 1e9:.4f} |")
    return header + "\n".join(lines) + "\n"
