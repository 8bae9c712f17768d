"""What a claims row (``methods.lyanna.claims``) must pass before its verdict stands: the run exercised the claim,
the verdict survives leaving out any one prompt, and every seed of the models it reads gives the same verdict.
Torch-free, as every view.

- ``Measured``: a row's statistic as the per-turn columns it sums, the statistic of those sums and each turn's
  prompt (the bootstrap's cluster): its value, its interval (``harness.analysis.timing.cluster_bootstrap``) and the
  same with one prompt left out (``leave_one_cluster_out``) come from one definition.
- Exercised: a reuse or tree-building claim needs drafting deeper than one step (``depth_exercised``); the fusion
  ablation needs equal tau with and without fusion (``tau_exercised``).
- Seeds (``seed_frames``): a variant ``<name>_seed<s>`` of the same method is ``<name>`` retrained with seed ``s``
  (the seeds study); the frame of seed ``s`` puts it in ``<name>``'s place, so every row is measured again for it.
  A variant ``<name>_target<t>`` is ``<name>`` run on the zoo of target seed ``t`` (config ``target_seeds``: the
  target, its draft LM and drafters all retrained); the frame of target seed ``t`` holds those runs alone, each in
  ``<name>``'s place, so a row is measured again for it only where it ran every variant the row reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.analysis.timing import cluster_bootstrap, leave_one_cluster_out

NOT_EXERCISED = "not exercised here"
NOT_DECIDED = "not decided"
FRAGILE = "fragile"
FUSION_TAU_TOLERANCE = 0.02  # fusion removes overhead only: tau with and without it within 2% of each other
SEED_VARIANT = re.compile(r"^(?P<base>.+)_seed(?P<seed>\d+)$")
TARGET_VARIANT = re.compile(r"^(?P<base>.+)_target(?P<seed>\d+)$")


def identity(values: np.ndarray) -> np.ndarray:
    return values


@dataclass(frozen=True)
class Measured:
    """A statistic of the sums of per-turn ``columns`` over the turns kept (``statistic``: {column: sums} -> values),
    read through ``transform`` (e.g. ``np.exp`` of a mean log); ``clusters``: each turn's prompt."""

    columns: dict[str, np.ndarray]
    clusters: np.ndarray
    statistic: Callable[[dict[str, np.ndarray]], np.ndarray]
    transform: Callable[[np.ndarray], np.ndarray] = field(default=identity)

    def value(self) -> float:
        sums = {name: np.array([np.asarray(values, dtype=float).sum()]) for name, values in self.columns.items()}
        return float(self.transform(np.asarray(self.statistic(sums)))[0])

    def interval(self) -> tuple[float, float]:
        low, high = cluster_bootstrap(self.columns, self.clusters, self.statistic)
        return float(self.transform(np.array([low]))[0]), float(self.transform(np.array([high]))[0])

    def without_each(self) -> dict[str, tuple[float, float, float]]:
        """{prompt: (value, low, high) without its turns}."""
        raw = leave_one_cluster_out(self.columns, self.clusters, self.statistic)
        return {key: tuple(float(self.transform(np.array([number]))[0]) for number in values)
                for key, values in raw.items()}


def leave_one_out_check(measured: Measured, judged: str, judge: Callable[[float, float], str]) -> tuple[str, bool]:
    """The leave-one-prompt-out column and whether the verdict flips: the first prompt whose removal changes it."""
    drops = measured.without_each()
    flips = {key: judge(low, high) for key, (_, low, high) in drops.items() if judge(low, high) != judged}
    if not flips:
        return f"stable ({len(drops)} prompts)", False
    key = min(flips)
    return f"flips to '{flips[key]}' without {key} ({len(flips)} of {len(drops)} prompts)", True


def variant_depth(turns: pd.DataFrame, variant: str) -> int | None:
    """The tree depth a variant drafted at (its options in the records: the calibrated shape's), None if unsaid."""
    mine = turns[turns.variant == variant]
    if mine.empty:
        return None
    depth = json.loads(mine.options.iloc[0]).get("depth")
    return int(depth) if depth is not None else None


def depth_exercised(turns: pd.DataFrame, variants: list[str], why: str) -> str:
    """``yes: ...`` when every variant drafted deeper than one step, else ``no: ...`` (what the claim needs)."""
    depths = {variant: variant_depth(turns, variant) for variant in variants}
    said = ", ".join(f"{variant} depth {depth if depth is not None else '?'}" for variant, depth in depths.items())
    if all(depth is not None and depth > 1 for depth in depths.values()):
        return f"yes: {said}"
    return f"no: {said}; {why} needs drafting deeper than one step"


def tau_exercised(ratio: float) -> str:
    """The fusion ablation: tau without fusion over tau with it must be 1 within ``FUSION_TAU_TOLERANCE``."""
    if not np.isfinite(ratio):
        return "no: no shared turns to compare tau"
    if abs(ratio - 1) <= FUSION_TAU_TOLERANCE:
        return f"yes: tau equal with and without fusion (ratio {ratio:.3f})"
    return (f"no: tau without fusion is {ratio:.3f}x tau with it: fusion changed the drafts, so the speedup is not "
            f"overhead alone")


def is_exercised(text: str) -> bool:
    return text.startswith("yes")


def seed_variants(frame: pd.DataFrame, pattern: re.Pattern = SEED_VARIANT) -> dict[int, dict[str, str]]:
    """{seed: {variant: its seed-``seed`` variant}} of the frame's ``<variant>_seed<s>`` variants of one method (or
    of those ``pattern`` names: ``TARGET_VARIANT``)."""
    methods = frame.groupby("variant").method.first().to_dict()
    seeds: dict[int, dict[str, str]] = {}
    for name, method in methods.items():
        match = pattern.match(str(name))
        if match and methods.get(match["base"]) == method:
            seeds.setdefault(int(match["seed"]), {})[match["base"]] = name
    return dict(sorted(seeds.items()))


@dataclass(frozen=True)
class SeedFrame:
    """One seed's frame: ``replaced`` the variants whose models it replaced; ``whole``: every model (another
    target), so a row reads it only where it ran all the row's variants, not one of them."""

    frame: pd.DataFrame
    replaced: frozenset[str]
    whole: bool = False

    def reads(self, item: dict) -> bool:
        names = {item["variant"], item["against"]} - {""}
        return names <= self.replaced if self.whole else bool(names & self.replaced)


def seed_frames(frame: pd.DataFrame) -> dict[str, SeedFrame]:
    """{"seed 0": the frame, nothing replaced}; per drafter seed ``s`` ("seed s"), the frame with each
    ``<name>_seed<s>`` in ``<name>``'s place; per target seed ``t`` ("target seed t"), the runs of its
    ``<name>_target<t>`` variants (with their own `ar` turns), each in ``<name>``'s place. No frame holds a seed's
    or a target's variants under their own names."""
    targets = seed_variants(frame, TARGET_VARIANT)
    target_runs = {t: set(frame[frame.variant.isin(mapping.values())].run) for t, mapping in targets.items()}
    main = frame[~frame.run.isin(set().union(*target_runs.values()))] if targets else frame
    seeds = seed_variants(main)
    every_seed_variant = {name for mapping in seeds.values() for name in mapping.values()}
    base = main[~main.variant.isin(every_seed_variant)]
    out = {"seed 0": SeedFrame(base, frozenset())}
    for seed, mapping in seeds.items():
        swapped = main[main.variant.isin(mapping.values())]
        swapped = swapped.assign(variant=swapped.variant.map({name: base_name for base_name, name in mapping.items()}))
        kept = base[~(base.variant.isin(mapping) & (base.role == "method"))]
        out[f"seed {seed}"] = SeedFrame(pd.concat([kept, swapped], ignore_index=True), frozenset(mapping))
    for seed, mapping in targets.items():
        runs = frame[frame.run.isin(target_runs[seed])]
        runs = runs.assign(variant=runs.variant.replace({name: base_name for base_name, name in mapping.items()}))
        out[f"target seed {seed}"] = SeedFrame(runs, frozenset(mapping), whole=True)
    return out


ROW_KEY = ["claim", "measure", "variant", "against", "regime", "dataset", "temperature"]


def row_key(item: dict) -> tuple:
    """What a row measures, to find it in another seed's rows; a row that names its comparison by a rule (``compared``:
    lyanna over the better of sd and tree_sd) is found by the rule, whichever variant it chose for that seed."""
    temperature = item["temperature"]
    key = [item[name] for name in ROW_KEY[:-1]]
    if item.get("compared"):
        key[1] = key[3] = item["compared"]
    return tuple(key) + (None if not np.isfinite(temperature) else temperature,)


def seed_text(label: str, seed_row: dict, against: str) -> str:
    value = f" ({seed_row['value']:.3g}" if np.isfinite(seed_row["value"]) else ""
    if value and seed_row["against"] != against:
        value += f" over {seed_row['against']}"
    return f"{label}: {seed_row['verdict']}" + (value + ")" if value else "")


def combine_seeds(per_seed: dict[str, list[dict]], frames: dict[str, SeedFrame]) -> list[dict]:
    """Seed 0's rows, each called only where every seed that reads it (``SeedFrame.reads``) gives its verdict:
    ``not decided`` where two seeds differ; ``fragile`` where one seed's verdict flips without one prompt; a
    claim the run did not exercise reads ``not exercised here``. Column ``seeds`` names every seed it rests on."""
    others = {label: {row_key(item): item for item in rows} for label, rows in per_seed.items() if label != "seed 0"}
    combined = []
    for item in per_seed["seed 0"]:
        seeds = {"seed 0": item}
        for label, rows in others.items():
            if frames[label].reads(item) and row_key(item) in rows:
                seeds[label] = rows[row_key(item)]
        verdicts = {label: seed_row["verdict"] for label, seed_row in seeds.items()}
        final = verdicts["seed 0"]
        if len(set(verdicts.values())) > 1:
            final = NOT_DECIDED
        elif final not in (NOT_EXERCISED, "not measured") and any(seed_row["fragile"] for seed_row in seeds.values()):
            final = FRAGILE
        text = "; ".join(seed_text(label, seed_row, item["against"]) for label, seed_row in seeds.items())
        combined.append({**{key: value for key, value in item.items() if key not in ("fragile", "compared")},
                         "seeds": text, "verdict": final})
    return combined
