"""The calibration protocol every target's config goes through (issue 79): the main comparison runs every method at
the shape this machine measures best for it, by one rule, on every target. A main variant's chain length (sd's
``gamma``, pard's ``k``, dflash's ``verify_length``: ``ChainOptions``) is calibrated by rule chain_length, a beam
drafter's depth and budget (eagle, lyanna, prism, owl, medusa, mtp, dream: ``BeamOptions``) by rule tree_shape, and
tree_sd's Sequoia tree size by rule sequoia_tree.

A main variant that leaves its calibrated option out gets ``auto`` (what the config does not say is calibrated). A
main variant that fixes it is an error, not silently recalibrated: a fixed shape in the main comparison is what made
the real target's baselines untuned (issue 79), and a config that says ``gamma: 4`` should not run something else.
A fixed shape belongs to a study variant (``study: <name>``, or ``ablation: true``), which the report shows beside
the main comparison, never in it. A config whose runs decide no verdict (an engine check in a lent GPU window, a
published head at its published shape) says so once, with its reason: ``bench.fixed_shapes: <why>``.

Torch-free: the workflow applies it at plan time (``harness.workflow_plan.variant_table``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from harness.catalog import method_names
from harness.trees.beam_shape import SHAPE_FIELDS, beam_methods
from harness.trees.chain_shape import chain_field, chain_methods

AUTO = "auto"
SEQUOIA = "tree_sd"  # its tree's size: `tree_budget` (rule sequoia_tree); `branching` fixes a tree by hand


@lru_cache(maxsize=4)
def _calibrated_kinds(names: tuple[str, ...]) -> tuple[frozenset[str], dict[str, str]]:
    return frozenset(beam_methods()), {method: chain_field(method) for method in chain_methods()}


def calibrated_kinds() -> tuple[frozenset[str], dict[str, str]]:
    """(the catalog's beam drafters, {chain drafter: its length option}), read once per catalog (the plan asks for
    them at every variant of every job)."""
    return _calibrated_kinds(tuple(method_names()))


def is_main_settings(settings: dict[str, Any]) -> bool:
    """A variant of the main comparison: in no study and no ablation (``workflow_plan.study_of`` is None)."""
    return not settings.get("study") and not settings.get("ablation")


def fixed_shape_fields(method: str, settings: dict[str, Any]) -> list[str]:
    """The options of ``settings`` that fix what the protocol calibrates for ``method`` (none: nothing fixed)."""
    beams, chains = calibrated_kinds()
    if method in beams:
        return [name for name in SHAPE_FIELDS if name in settings and settings[name] != AUTO]
    if method in chains:
        field = chains[method]
        return [field] if field in settings and settings[field] != AUTO else []
    if method == SEQUOIA:
        fixed = ["tree_budget"] if settings.get("tree_budget", AUTO) != AUTO else []
        return fixed + [name for name in ("branching",) if name in settings]
    return []


def auto_fields(method: str, settings: dict[str, Any]) -> dict[str, str]:
    """What the protocol adds to a main variant that leaves its calibrated option out: ``budget: auto`` for a beam
    drafter, ``<length>: auto`` for a chain drafter (tree_sd's Sequoia tree is `tree_budget: auto` by default)."""
    beams, chains = calibrated_kinds()
    if method in beams and "budget" not in settings:
        return {"budget": AUTO}
    if method in chains and chains[method] not in settings:
        return {chains[method]: AUTO}
    return {}


def calibrated_settings(variant: str, method: str, settings: dict[str, Any]) -> dict[str, Any]:
    """A main variant's settings under the protocol: its calibrated option `auto`; one line when it fixes one."""
    fixed = fixed_shape_fields(method, settings)
    if fixed:
        shown = ", ".join(f"{name}: {settings[name]}" for name in fixed)
        raise ValueError(f"bench.methods.{variant}: {shown} fixes a main variant's shape; the calibration protocol "
                         f"measures it on every target (harness/trees/calibration_protocol.py): leave it out or say "
                         f"auto, or make the variant a study (study: <name>), or give the config's reason for fixed "
                         f"shapes (bench.fixed_shapes)")
    return {**settings, **auto_fields(method, settings)}


def protocol_variants(variants: dict[str, dict[str, Any]], fixed_reason: str | None) -> dict[str, dict[str, Any]]:
    """``variants`` (bench.methods and the implied ones) with every main variant calibrated; unchanged when the
    config gives ``fixed_reason`` (bench.fixed_shapes)."""
    if fixed_reason:
        return variants
    return {name: calibrated_settings(name, settings.get("method", name), settings) if is_main_settings(settings)
            else settings for name, settings in variants.items()}
