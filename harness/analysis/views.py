"""The report's views, one entry each: what ``summarize`` writes beside the summary, what ``figures`` draws, what the
report shows after its results tables, and what the workflow plans (``workflow/rules/report.smk``). A method's own
views are in ``methods/<name>/view.py`` and join these here (``all_views``). What a view is: ``harness.analysis.view``;
adding one: docs/extending.md.

The order is the report's: sections in this order, and the figures in this order under *Figures*.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pandas as pd

from harness.analysis.categories import category_sections, category_table
from harness.analysis.context_length import category_bucket, context_length_table, context_section
from harness.analysis.drafting import drafting_section
from harness.analysis.families import (
    comparison_table, data_source_rows, data_source_table, drafting_variants, family_table, published_table,
)
from harness.analysis.regime import regime_card
from harness.analysis.report_timing import control_section, cost_section, phase_section
from harness.analysis.sections import (
    ablations_section, drafter_studies_section, samples_section, verifier_comparison,
)
from harness.analysis.summary import depth_acceptance, records_frame, sample_table, summarize, write_table
from harness.analysis.view import SUMMARY, Inputs, Scope, View, method_view_module
from harness.catalog import catalog, entry
from harness.errors import DraftcountError

SIZE_OPTIONS = {"budget", "tree_budget", "gamma", "branching", "tree_file", "depth", "top_k"}  # draft size
FIGURES = "harness.analysis.figures:"
MORE_FIGURES = "harness.analysis.figures_more:"  # depth, efficiency, budget, samples


def budget_families(summary: pd.DataFrame) -> dict[tuple[str, str], list[str]]:
    """Variants of one method and verifier whose options differ only in draft size (budget, gamma, tree shape)."""
    families: dict[tuple[str, str], list[str]] = {}
    sizes: dict[tuple[str, str], set[str]] = {}
    verifiers = summary.verifier if "verifier" in summary else pd.Series("token_level", index=summary.index)
    table = summary.assign(verifier=verifiers)
    for (method, verifier, variant), options in table.groupby(["method", "verifier", "variant"]).options.first().items():
        parsed = json.loads(options or "{}")
        others = {k: v for k, v in parsed.items() if k not in SIZE_OPTIONS}
        key = (method, verifier + json.dumps(others, sort_keys=True))
        families.setdefault(key, []).append(variant)
        sizes.setdefault(key, set()).add(json.dumps({k: v for k, v in parsed.items() if k in SIZE_OPTIONS},
                                                    sort_keys=True))
    # a family is several variants whose sizes differ (ar beside ar_control, the same options twice, is none)
    return {key: variants for key, variants in families.items() if len(variants) > 1 and len(sizes[key]) > 1}


def size_sweeps(scope: Scope) -> bool:
    """Plan time: two variants of one method and verifier with different draft sizes (a budget family, if the rest
    of their options agree)."""
    sizes: dict[tuple[str, str], set[str]] = {}
    for item in scope.variants:
        size = {key: value for key, value in item.settings.items() if key in SIZE_OPTIONS}
        sizes.setdefault((item.method, str(item.settings.get("verifier", "token_level"))), set()).add(
            json.dumps(size, sort_keys=True, default=str))
    return any(len(found) > 1 for found in sizes.values())


def several_categories(scope: Scope) -> bool:
    """Plan time: a prompt set with several categories (or whose categories the plan cannot know)."""
    return any(categories is None or len(set(categories)) > 1 for categories in scope.prompt_categories())


def long_context(scope: Scope) -> bool:
    """Plan time: a prompt set of long-context buckets (``ctx<L>`` categories: ``harness.data.long_context``), or
    one whose categories the plan cannot know."""
    return any(categories is None or any(category_bucket(name) is not None for name in categories)
               for categories in scope.prompt_categories())


def drafting_scope(scope: Scope) -> bool:
    """Plan time: a variant whose method runs a drafter (a draft LM or a trained drafter)."""
    return any(entry(item.method).needs_drafter or entry(item.method).needs_draft for item in scope.variants)


def rung_curves(data: Inputs) -> pd.DataFrame | None:
    """The learning curves' table beside a main report (``studies/tables/learning_curves.csv`` next to its
    ``tables/``), where rule learning_curves wrote it; None elsewhere."""
    if not data.tables_dir:
        return None
    path = Path(data.tables_dir).parent / "studies" / "tables" / "learning_curves.csv"
    return pd.read_csv(path) if path.is_file() else None


def several_samples(scope: Scope) -> bool:
    return any(int(item.settings.get("samples") or 1) > 1 for item in scope.variants)


VIEWS: tuple[View, ...] = (
    View("regime", head=True, title="Regime",
         section=lambda data: regime_card(data.metrics, data.summary, rung_curves(data)),
         intro="What decides how far these rankings transfer to another model and machine "
               "(`harness/analysis/regime.py`)."),
    View("speedup", figure=FIGURES + "plot_speedup", caption=(
        "Speedup over `ar` for each method's main variant and the A/A control `ar_control`, one row each in its "
        "method's colour (every figure's order: the baselines, the paper's pair, the other methods in catalog "
        "order), one bar per dataset (plain, hatched, dotted: see the legend); geometric mean of paired per-turn "
        "ratios, whiskers: prompt-bootstrap 95% interval; a white diamond marks the bound, the speedup with zero "
        "host time. A red outline and name: greedy turns that left the paired `ar` output; a red panel title: the "
        "control outside +-3% (see the report's warnings).")),
    View("phases", figure=FIGURES + "plot_phases", caption=(
        "Time per emitted token by phase (mean over datasets), one row per main variant: the target's prefill and "
        "verify forwards, the drafter's forwards, verification and sampling, and the host's share (everything "
        "else).")),
    View("tau", figure=FIGURES + "plot_tau", caption=(
        "Acceptance length tau (EAGLE/Spec-Bench: mean accepted length per decoding step, prefill excluded), one "
        "row per main variant, one bar per dataset; the white dot marks accepted draft tokens per verification step "
        "(no bonus token).")),
    View("waste", figure=FIGURES + "plot_waste", caption=(
        "Compute per emitted token (FLOPs, mean over datasets), one row per main variant in its colour: drafter "
        "(dark) and verifier (pale) work that led to an emitted token (solid) and work thrown away (hatched).")),
    View("budget", applies=size_sweeps, has_data=lambda data: bool(budget_families(data.summary)),
         figure=MORE_FIGURES + "plot_budget", caption=(
             "Tau and speedup against the tokens verified per step (tree size), for variants of one method that "
             "differ only in their draft budget; each point is labelled with its variant (past the method's name).")),
    View("depth", table=depth_acceptance, table_name="depth_acceptance", figure=MORE_FIGURES + "plot_depth", caption=(
        "Per-depth acceptance rate (pooled over datasets), one row per main variant: of the verification steps that "
        "reached depth d - 1 (the count under each rate), the share that accepted a draft token at depth d. A cell "
        "of fewer than 20 steps shows only its count (grey); depths that no variant reached 20 times are left out.")),
    View("efficiency", figure=MORE_FIGURES + "plot_efficiency", caption=(
        "Speedup (filled marker) beside its bound, tokens per target forward (hollow: the speedup of overhead-free "
        "drafting), one row per main variant, one marker shape per dataset; the gap between them is the overhead.")),
    View("ablations", title="Ablations and budget sweeps",
         intro="Each variant against its method's default configuration on the same prompts.",
         section=lambda data: ablations_section(data.summary, data.main)),
    View("categories", applies=several_categories, table=category_table,
         figure="harness.analysis.categories:plot_categories",
         caption=("Speedup over `ar` per category of each prompt set that has several (its prompts' own categories: "
                  "the domains of `stdlib_domains`, Spec-Bench's tasks with MT-Bench's eight categories as one), a "
                  "heat map per set and temperature: one row per variant (main ones first), the value in each cell "
                  "(blue above 1, red below; bold: its prompt-bootstrap 95% interval leaves 1)."),
         title="Per category", section=lambda data: category_sections(data.table("categories"), data.main)
         if not data.table("categories").empty else "",
         intro="Spec-Bench's view: each prompt set with several categories, by task (MT-Bench's eight categories are "
               "one task, multi-turn conversation) or by category, measured on that category's turns only "
               "(`harness/analysis/categories.py`). Rows: every variant that ran on such a set (ablations included, "
               "main variants first)."),
    View("context_length", applies=long_context, table=context_length_table,
         figure="harness.analysis.context_length:plot_context_length",
         caption=("Tau against the prompt's length (tokens, by bucket of the long-context set `stdlib_long`): a "
                  "drafter that attends over the context (eagle) against one that reads the last state only (owl, "
                  "OWL's question)."),
         title="By context length", section=lambda data: context_section(data.table("context_length"), data.main),
         intro="The long-context set (`stdlib_long`: held-out files cut to buckets of prompt tokens, "
               "`harness/data/long_context.py`): tau per bucket, measured on that bucket's turns only. A drafter "
               "trained on short windows that attends over the context (eagle) against one that reads only the last "
               "state (owl)."),
    View("families", title="Drafter families",
         section=lambda data: family_table(data.summary, drafting_variants(data.summary, data.main)),
         intro="Every main variant with a drafter (a draft LM, a trained drafter, a chain of them): what it buys "
               "(tau, the paired speedup with its 95% interval) beside what it costs (drafter-FLOP waste, parameters, "
               "FLOPs per decoding step), from the same runs (`harness/analysis/families.py`)."),
    View("drafting", title="Drafting at T > 0: top-k or sampled drafts",
         section=lambda data: drafting_section(data.summary),
         intro="Each family's chain of one length at T > 0 drafted two ways on the same prompts (study `drafting`, "
               "`harness/analysis/drafting.py`): its best tokens verified as if drawn with probability 1 (top-k: "
               "EAGLE's convention, a draft accepted with the target's probability of it) or drawn from its own "
               "warped distribution and carried into verification (sampled: SD's, accepted with min(1, p / q)). "
               "The last column is the convention the family's main variant drafts by there (the calibration "
               "chooses per method and temperature where it measured both)."),
    View("forwards", applies=drafting_scope, has_data=lambda data: bool((data.summary.drafter_parameters > 0).any()),
         figure="harness.analysis.families:plot_forwards", caption=(
             "Drafter forwards per decoding step beside tau (mean over datasets; filled: T = 0, hollow: T = 1), one "
             "row per variant with a drafter: a block drafter (dflash, dspark) reaches its tau in one forward, a head "
             "in one per tree depth, a draft LM in one per drafted token.")),
    View("data_source", title="Training data: corpus or the target's own continuations",
         has_data=lambda data: not data_source_rows(data.summary, data.main).empty,
         section=lambda data: data_source_table(data.summary, data.main),
         intro="Each drafter trained on the target's own continuations of training-split prompts (`data: "
               "regenerate`, `python -m harness regenerate`: half greedy, half sampled at T = 1) beside its "
               "method's main variant, trained on the corpus; same prompts, same run."),
    View("head_to_head", title="Head to head", section=lambda data: comparison_table(data.summary, data.compare),
         intro="Each configured comparison (`report.compare`: variant = against), on the same prompts in the same "
               "run: the change of tau, both speedups, and the drafters' parameter and per-step FLOP ratios (PRISM "
               "against EAGLE at equal FLOPs per step, a GTO-fine-tuned drafter against the drafter it started from, "
               "...)."),
    View("published", title="Beside the published figures",
         section=lambda data: published_table(data.summary, data.published),
         intro="Each variant whose system published its own speedups (`report.published`), beside what this run "
               "measured: tau and the paired speedup per dataset at T = 0 and T = 1. Their targets, drafters and "
               "hardware are theirs, not this run's: the columns show the shape, not a reproduction."),
    View("control", title="Control: `ar` against `ar`", section=lambda data: control_section(data.summary),
         intro="`ar_control` runs `ar` paired with `ar` exactly as every other variant is paired (same engine, same "
               "prompts, interleaved): any speedup it shows is measurement error, and it must read 1.00 within "
               "+-3%."),
    View("phase_times", title="Where the time goes", section=lambda data: phase_section(data.summary, data.main),
         intro="Milliseconds per emitted token by phase (`harness/backend/phases.py`): the target's prefill and "
               "verify forwards, the drafter's forwards, verification and sampling, and the host (everything else: "
               "tree building, bookkeeping, cache edits, a model-free method's lookup). `model share` is the share of "
               "the wall time in model forwards, `host share` the share outside forwards and verification; `bound` "
               "is the speedup with zero host time on both sides, next to the measured one."),
    View("cost_structure", title="Cost structure", section=lambda data: cost_section(data.summary),
         intro="The target's 1-token forward (from `ar`), each variant's verify forward over its tree and its drafter "
               "step, measured in the same runs. Speculation pays when a verify forward costs little more than a "
               "1-token forward and a drafter step a small fraction of it."),
    View("drafter_studies", title="Learning curves and learning rates", section=drafter_studies_section,
         intro="The drafter studies (studies `learning_curves`, `lr` and `dump_precision`; their rules write "
               "their tables beside this report's): how each family's drafter improves with training positions, "
               "whether the families' ranking holds from budget to budget, the learning rate each one uses, and "
               "whether a float16 feature dump trains the drafter a float32 one does."),
    View("traversal", title="Traversal verification", section=lambda data: verifier_comparison(data.summary),
         intro="The same method and options verified token by token and by Traversal Verification (leaf-to-root, "
               "sequence-level): tau should not fall, and the paper reports +2-6%."),
    View("samples", applies=several_samples, table=sample_table, figure=MORE_FIGURES + "plot_samples",
         caption=("Tau against the sample index, for variants run with several samples per prompt (a method that "
                  "learns across one prompt's samples, as stand's store does, should rise)."),
         title="Several samples per prompt", section=lambda data: samples_section(data.table("samples")),
         intro="Variants run with several samples per prompt (`samples:`), by sample index (1 = the first)."),
)


@lru_cache(maxsize=1)
def all_views() -> tuple[View, ...]:
    """``VIEWS`` with each catalog method's own (``VIEWS`` in ``methods/<name>/view.py``), each placed after the view
    its ``after`` names (several after one view: in catalog order), else last."""
    ordered = list(VIEWS)
    placed: dict[str, int] = {}  # view name -> method views placed after it so far
    for method in catalog():
        module = method_view_module(method)
        for view in getattr(module, "VIEWS", ()) if module else ():
            if not isinstance(view, View):
                raise DraftcountError(f"method {method!r}: VIEWS in its view.py must hold harness.analysis.view.View")
            names = [known.name for known in ordered]
            if view.after in names:
                ordered.insert(names.index(view.after) + 1 + placed.get(view.after, 0), view)
                placed[view.after] = placed.get(view.after, 0) + 1
            else:
                ordered.append(view)
    names = [view.name for view in ordered]
    tables = [view.table_file for view in ordered if view.table is not None] + [SUMMARY]
    twice = sorted({name for name in names if names.count(name) > 1} | {name for name in tables
                                                                          if tables.count(name) > 1})
    if twice:
        raise DraftcountError(f"two views (or tables) are called {twice[0]!r}")
    return tuple(ordered)


def scope_views(scope: Scope) -> list[View]:
    """The views that apply to a report's scope (plan time)."""
    return [view for view in all_views() if view.applies(scope)]


def figure_names(scope: Scope | None = None) -> list[str]:
    """The figures of a scope's report (default: every view's figure), in the report's order."""
    return [view.name for view in (all_views() if scope is None else scope_views(scope)) if view.figure]


def table_names() -> list[str]:
    """The tables ``summarize --tables-dir`` writes beside ``summary.csv``."""
    return [view.table_file for view in all_views() if view.table is not None]


def write_tables(records: list[Path], tables_dir: Path | None, summary_out: Path | None = None) -> pd.DataFrame:
    """From records files: the summary (to ``summary_out``, default ``tables_dir/summary.csv``) and, with
    ``tables_dir``, every view's table (``tables_dir/<name>.csv``, only its header when it has no rows)."""
    frame = records_frame(records)
    summary = summarize(frame)
    write_table(summary, summary_out or Path(tables_dir) / f"{SUMMARY}.csv")
    for view in all_views() if tables_dir is not None else ():
        if view.table is not None:
            write_table(view.table(frame), Path(tables_dir) / f"{view.table_file}.csv")
    return summary


def embedded_figures(data: Inputs, figures_dir: Path) -> list[View]:
    """The figures a report shows: drawn into ``figures_dir`` and with data."""
    return [view for view in all_views()
            if view.figure and (Path(figures_dir) / f"{view.name}.png").is_file() and view.with_data(data)]
