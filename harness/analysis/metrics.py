"""The metric table: every column of the summary table, with its formula, its format and its definition.

The summary (``harness.analysis.summary``) writes exactly these columns in this order, the report's results table
and its definitions come from the rows marked for the report, and ``docs/metrics.md`` is this table as a page
(``python -m harness metrics --out docs/metrics.md``; a test keeps it in step). Adding a metric: compute it in
``summarize`` and add its row here. Sums run over the turns of one variant x dataset x temperature (the method's
own turns; its paired `ar` turns only in the speedups).

Acceptance length has two conventions in the field; ``tau`` is EAGLE's and Spec-Bench's (mean accepted length
per decoding step, prefill excluded: the reported one), ``tokens_per_forward`` the other (new tokens per target
forward, prefill counted). ``harness.analysis.specbench`` exports the same accept lengths for Spec-Bench.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """name: the summary column. formula: how it is computed from the per-turn counters. definition: what it
    means. label, fmt, scale: its column in the report's results table (no label: not in that table); the value
    shown is ``fmt.format(value / scale)``."""

    name: str
    formula: str
    definition: str
    label: str = ""
    fmt: str = "{:.2f}"
    scale: float = 1.0
    in_summary: bool = True  # False: a column only the report shows (built from summary columns)


USEFUL_DRAFTER_FLOPS = "drafter_useful_flops"  # the counters' extra that drafter-FLOP waste is computed from
SETTLED_DRAFTER_FLOPS = "drafter_settled_flops"  # the share of the useful FLOPs that DrafterWork.settle booked
PREFILL_TOKENS = "drafter_prefill_tokens"  # the counters' extra: prompt positions a head reads after the prefill

METRICS: tuple[Metric, ...] = (
    Metric("variant", "the variant's name (bench.methods)", "a configuration of a method"),
    Metric("method", "the catalog method the variant runs", "the method"),
    Metric("dataset", "the prompt set", "the dataset"),
    Metric("temperature", "sampling temperature (0 = greedy)", "the temperature"),
    Metric("verifier", "the verifier of the method's turns (`token_level` or `traversal`)",
           "how drafts were verified; `ar` baselines always use `token_level`"),
    Metric("turns", "count of the method's generated turns", "generations measured (prompts x turns)"),
    Metric("diverged_turns", "count of greedy turns whose output_ids differ from their paired ar turn's (NaN at "
           "T > 0)", "greedy turns that left the target's own text: 0 in float32 for a lossless method; in bf16 a "
           "near-tie can flip (the report warns about any)"),
    Metric("tokens_per_s", "sum(new_tokens) / sum(wall_seconds)",
           "new tokens (trimmed at EOS, counted the same way for every method) over the wall time of the "
           "generation, prefill included; warm-up generations are not timed. The timer is named in every raw "
           "record (`timer`: `perf_counter` on CPU, CUDA events on a GPU)", "tokens/s", "{:.1f}"),
    Metric("tau", "sum(accept lengths) / sum(verification steps); a turn's accept lengths are accepted drafts + 1 "
           "per verification step, the last one cut where the output ends (EOS, max_new_tokens), none for the "
           "prefill",
           "mean accepted length per decoding step, EAGLE's and Spec-Bench's convention (the `#Mean accepted "
           "tokens` of Spec-Bench's `evaluation/speed.py` on our export, `python -m harness specbench-speed`): "
           "each verification step counts the tokens it appends, its root (the token the previous forward "
           "produced) and its accepted drafts; the prefill is not a step. It is 1 for `ar` and at least 1 for every "
           "method. Every `tau` column (this table, the report's tables, the per-sample table, the figures) is this "
           "one; `tokens_per_forward` is the other common convention (draftcount's tau before issue 36)",
           "tau"),
    Metric("tokens_per_forward", "sum(new_tokens) / sum(target forwards)",
           "new tokens per target forward pass, the prefill forward and its token counted and the last bonus "
           "token included: the speedup of free, perfect drafting whose forwards cost what ar's do. A method that "
           "runs the target twice per step (`lyanna` with `verify_fusion=off`) can read below 1"),
    Metric("accepted_per_step", "sum(accepted draft tokens) / sum(verification steps)",
           "accepted draft tokens per verification step, without the bonus token (gpt-fast's convention)",
           "accepted/step"),
    Metric("token_waste", "1 - sum(accepted draft tokens) / sum(draft tokens sent to verification)",
           "the share of drafted tokens (tree nodes, root excluded) that verification rejected", "token waste"),
    Metric("drafter_flop_waste", "1 - sum(useful drafter FLOPs) / sum(drafter FLOPs)",
           "the share of drafter FLOPs whose output never reached an accepted token or a state the drafter "
           "reused, for every method alike: a forward that processed context and also drafted (an EAGLE head's "
           "catch-up forward, whose last position drafts depth 1; a draft LM's first forward of a step) is split "
           "by what each position produced, evenly by position: the context positions' share is useful, the "
           "drafting position's is wasted when every draft it produced is rejected (before issue 79 the whole "
           "forward counted as context, so a depth-1 head read 0 waste). FLOPs are analytic: 2 x parameters x "
           "tokens processed, plus attention", "drafter-FLOP waste"),
    Metric("drafter_flops_per_accepted", "sum(drafter FLOPs) / sum(accepted draft tokens)",
           "drafter FLOPs (all of them) per accepted draft token", "drafter MFLOPs/accepted", "{:.1f}", 1e6),
    Metric("drafter_wasted_flops_per_accepted", "sum(drafter FLOPs - useful drafter FLOPs) / sum(accepted)",
           "wasted drafter FLOPs per accepted draft token"),
    Metric("verify_waste", "1 - (sum(accepted) + sum(verification steps)) / sum(verified tokens)",
           "verified tokens that were neither an accepted draft nor a step's root / all verified tokens",
           "verify waste"),
    Metric("flops_per_token", "(sum(target FLOPs) + sum(drafter FLOPs)) / sum(new_tokens)",
           "all FLOPs (target, prefill included, and drafter) per emitted token"),
    Metric("drafter_flops_per_step", "sum(drafter FLOPs) / sum(verification steps)",
           "drafter FLOPs spent per decoding step (every drafter forward of the step: a head's depths, a draft LM's "
           "tokens, every stage of a chain)", "drafter MFLOPs/step", "{:.2f}", 1e6),
    Metric("drafter_flops_per_draft", "sum(drafter FLOPs) / sum(drafted tokens)",
           "drafter FLOPs per draft token (a tree node, root excluded), accepted or not: what one draft costs its "
           "drafter at the shape it ran (the models table shows each drafter's main variant's)"),
    Metric("drafter_forwards_per_step", "sum(drafter forwards) / sum(verification steps)",
           "drafter forwards per decoding step (a draft LM's tokens, a head's depths, one for a block drafter)"),
    Metric("drafter_forwards_per_token", "sum(drafter forwards) / sum(new_tokens)",
           "drafter forwards per emitted token"),
    Metric("drafter_data", "the drafter's training data (its metadata's `data`): `regenerated` (the target's own "
           "continuations), `corpus`, or empty without a trained drafter", "what the drafter learnt from"),
    Metric("drafter_parameters", "the drafter's parameters (its trained drafter's trainable parameters, else its "
           "draft LM's)", "what the drafter holds: with FLOPs per step, the two sides of a fair comparison (PRISM "
           "holds M modules and runs one per step)", "drafter params (M)", "{:.3f}", 1e6),
    Metric("draft_vocab", "the trained drafter's draft vocabulary (its `method_details`' `draft_vocab`), 0 without "
           "one", "the tokens a trained drafter predicts over: the target's whole vocabulary, or the N most frequent "
           "of its training data (`draft_vocab`), whose logits cost N x width a row", "draft vocab", "{:.0f}"),
    Metric("verified_per_step", "sum(verified tokens) / sum(verification steps)",
           "tokens the target processes per verification step (the tree size, root included)"),
    Metric("drafter_useful_flops_per_token", "sum(useful drafter FLOPs) / sum(new_tokens)",
           "drafter FLOPs that led to an emitted token, per emitted token"),
    Metric("drafter_wasted_flops_per_token", "sum(drafter FLOPs - useful drafter FLOPs) / sum(new_tokens)",
           "drafter FLOPs thrown away, per emitted token"),
    Metric("verify_useful_flops_per_token",
           "target FLOPs x (verified / all target tokens) x (accepted + roots) / verified / sum(new_tokens)",
           "verification FLOPs (the target's, prefill excluded, shared by token count) spent on accepted drafts "
           "and roots, per emitted token"),
    Metric("verify_wasted_flops_per_token",
           "target FLOPs x (verified / all target tokens) x rejected / verified / sum(new_tokens)",
           "verification FLOPs spent on rejected nodes, per emitted token"),
    Metric("options", "the variant's method options and drafter, as JSON", "how the variant was configured"),
    Metric("speedup_paired_mean", "exp(mean over turns of log(tokens_per_s(method) / tokens_per_s(ar))), same "
           "prompt", "for every turn, the method's tokens/s over `ar`'s on the same prompt in the same process (the "
           "two run interleaved, prompt by prompt, with the same sampling settings, seeds, dtype and device); the "
           "geometric mean of these paired ratios (an arithmetic mean of noisy ratios is biased above 1: see "
           "`harness/analysis/timing.py`). The variant `ar_control` pairs `ar` with itself: it must read 1.00",
           "speedup"),
    Metric("speedup_ci", "[speedup_ci_low, speedup_ci_high]",
           "percentile bootstrap 95% interval of the paired speedup (2,000 resamples of the prompts, a prompt's "
           "turns together; fixed seed)", "95% interval", "{}", in_summary=False),
    Metric("speedup_total", "(sum(new_tokens) / sum(wall_seconds)) / (the same for the paired ar turns)",
           "the ratio of total tokens/s of the method and of its paired `ar` turns", "speedup (totals)"),
    Metric("speedup_specbench", "mean over prompts of sum(new_tokens) / sum(wall_seconds) of the prompt's turns, "
           "over the same mean for the paired ar turns; first sample of each prompt only",
           "the speedup Spec-Bench's `evaluation/speed.py` computes from our export (`python -m harness "
           "specbench-speed` gives the same number; speed.py itself counts ar's tokens again from the text with "
           "the tokenizer, see docs/workflow.md): a ratio of arithmetic means of per-prompt tokens/s, so it weighs "
           "prompts by their speed rather than pairing turns, and differs from the paired geometric mean"),
    Metric("repeats", "number of distinct `repeat` values of the records (bench.repeats)",
           "runs of the whole prompt set in the job (1 unless bench.repeats is set)"),
    Metric("speedup_repeat_std", "standard deviation (ddof 1) over repeats of each repeat's paired speedup",
           "the spread of the paired speedup between runs of the same job, as Spec-Bench reports mean +- std over "
           "runs; NaN with one repeat (the speedup itself is over all repeats' turns)", "+- std (runs)"),
    Metric("speedup_ci_low", "2.5th percentile of 2,000 prompt-bootstrap geometric means of the paired ratios",
           "lower end of the paired speedup's 95% interval"),
    Metric("speedup_ci_high", "97.5th percentile of 2,000 prompt-bootstrap geometric means of the paired ratios",
           "upper end of the paired speedup's 95% interval"),
    Metric("speedup_bound", "(ar's wall - host seconds per token) / (the variant's wall - host seconds per token), "
           "paired turns", "the speedup with zero host overhead on both sides: only model forwards (prefill, "
           "target, drafter) and verification counted. The gap to the measured speedup is what the host costs",
           "bound"),
    Metric("phase_prefill_per_token", "sum(prefill seconds) / sum(new_tokens)",
           "seconds per emitted token in the target's forward over the prompt", "prefill ms/token", "{:.2f}", 1e-3),
    Metric("phase_target_per_token", "sum(target verify-forward seconds) / sum(new_tokens)",
           "seconds per emitted token in the target's forwards after the prefill (verification forwards)",
           "target ms/token", "{:.2f}", 1e-3),
    Metric("phase_drafter_per_token", "sum(drafter-forward seconds) / sum(new_tokens)",
           "seconds per emitted token in the drafter's forwards and logits (draft model, head, backbone)",
           "drafter ms/token", "{:.2f}", 1e-3),
    Metric("phase_verify_per_token", "sum(verification and sampling seconds) / sum(new_tokens)",
           "seconds per emitted token in the verifier's walk over the tree and sampling", "verify ms/token",
           "{:.2f}", 1e-3),
    Metric("phase_host_per_token", "sum(wall - the four phases above) / sum(new_tokens)",
           "seconds per emitted token outside them: tree building, bookkeeping, cache edits, copies, the "
           "method's own logic (a model-free lookup, say)", "host ms/token", "{:.2f}", 1e-3),
    Metric("model_share", "sum(prefill + target + drafter seconds) / sum(wall_seconds)",
           "the share of the wall time spent in model forwards", "model share"),
    Metric("host_share", "sum(host seconds) / sum(wall_seconds)",
           "the share of the wall time spent outside model forwards and verification", "host share"),
    Metric("target_seconds_per_forward", "sum(target verify-forward seconds) / sum(target forwards - 1 per turn)",
           "seconds per target forward after the prefill (one verification forward over the tree)"),
    Metric("drafter_seconds_per_forward", "sum(drafter seconds) / sum(drafter forwards)",
           "seconds per drafter forward (a draft-model step, a head's depth step, a backbone step)"),
    Metric("efficiency", "speedup_paired_mean / tokens_per_forward",
           "how much of the bound speedup = tokens per target forward (free, perfect drafting) was realised",
           "efficiency"),
)


def summary_columns() -> list[str]:
    """The summary table's columns, in order."""
    return [metric.name for metric in METRICS if metric.in_summary]


REPORT_COLUMNS = ("tokens_per_s", "speedup_paired_mean", "speedup_ci", "speedup_bound", "speedup_total", "tau",
                  "accepted_per_step", "token_waste", "drafter_flop_waste", "verify_waste", "drafter_flops_per_accepted", "efficiency",
                  "host_share")
PHASE_REPORT_COLUMNS = ("phase_prefill_per_token", "phase_target_per_token", "phase_drafter_per_token",
                        "phase_verify_per_token", "phase_host_per_token", "model_share", "host_share",
                        "speedup_bound", "speedup_paired_mean")


def report_metrics(names: tuple[str, ...] = REPORT_COLUMNS) -> list[Metric]:
    """The metrics of a report table's columns, in the order it shows them (default: the results tables')."""
    by_name = {metric.name: metric for metric in METRICS}
    return [by_name[name] for name in names]


def report_definitions() -> str:
    """The report's definitions of its results-table columns (markdown list)."""
    return "".join(f"- **{metric.label}**: {metric.definition}.\n" for metric in report_metrics())


def metrics_markdown(width: int = 118) -> str:
    """docs/metrics.md: every summary column with its formula and definition (lines of at most ``width``)."""
    lines = [
        "# Metrics",
        "",
        "Generated from `harness/analysis/metrics.py` by `python -m harness metrics --out docs/metrics.md`;",
        "do not edit by hand. Every column of `results/tables/summary.csv`, in order. Sums run over the turns of",
        "one variant x dataset x temperature (the method's own turns; its paired `ar` turns only in the speedups).",
        "A label in brackets is the column's heading in the report's results table.",
        "",
    ]
    for metric in METRICS:
        heading = f"## `{metric.name}`" + (f" ({metric.label})" if metric.label else "")
        lines += [heading + ("" if metric.in_summary else ", report only"), ""]
        lines += textwrap.wrap(f"Formula: {metric.formula}.", width) + [""]
        lines += textwrap.wrap(metric.definition[0].upper() + metric.definition[1:] + ".", width) + [""]
    return "\n".join(lines).rstrip("\n") + "\n"
