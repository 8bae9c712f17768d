"""Measurements behind ``python -m harness measure <name>``, in three kinds: ``diagnostics`` (what the engine's own
machinery costs: our ``ar`` against ``generate()`` and a bare loop, the overhead switches, step costs, launches and
host synchronisations, the engine against an ideal one), ``calibrations`` (what a run chooses from this machine's
measurements: tree shapes, chain lengths, Sequoia's and STAND's trees, the draft vocabulary, the answers' batch
size, the dump's precision) and ``projections`` (what measured acceptance gives at Llama-3.1-8B's shape or under
load). Beside them, what they share: ``shapes`` (the model shapes they build), ``method_runs`` (a method's run on
small models), and ``workflow_time`` (where a Snakemake run's time went).

``MEASUREMENTS`` maps each subcommand to the module whose ``main(argv)`` runs it.
"""

from __future__ import annotations

DIAGNOSTICS, CALIBRATIONS, PROJECTIONS = ("harness.measure.diagnostics", "harness.measure.calibrations",
                                         "harness.measure.projections")

MEASUREMENTS: dict[str, tuple[str, str]] = {
    "ar-vs-generate": (f"{DIAGNOSTICS}.ar_vs_generate", "our ar against model.generate() on the same model"),
    "bare-loop": (f"{DIAGNOSTICS}.bare_loop", "our ar against a bare model(...) decode loop, with an A/A control"),
    "overheads": (f"{DIAGNOSTICS}.overheads", "each overhead switch against its absence, interleaved"),
    "step-costs": (f"{DIAGNOSTICS}.step_costs", "seconds of each phase of a decoding step, per method"),
    "dispatch": (f"{DIAGNOSTICS}.dispatch", "ATen ops a decoding step dispatches outside graphed forwards, by phase, "
                                            "per method (each about one kernel launch in eager CUDA)"),
    "host-sync": (f"{DIAGNOSTICS}.host_sync_audit", "host synchronisations per decoding step, per method"),
    "static-tree": (f"{CALIBRATIONS}.static_tree", "a static tree pruned to the nodes most accepted on calibration "
                                                   "prompts (stand)"),
    "verifiers": (f"{CALIBRATIONS}.verifier_acceptance", "every verifier on the same trees: expected accepted drafts "
                                                         "per step"),
    "tree-shape": (f"{CALIBRATIONS}.tree_shape", "the depth and budget of highest estimated tokens/s for a beam "
                                                 "drafter on this machine (budget: auto)"),
    "chain-length": (f"{CALIBRATIONS}.chain_length", "the chain length of highest estimated tokens/s for sd, pard or "
                                                     "dflash on this machine (gamma: auto, k: auto, verify_length: "
                                                     "auto)"),
    "load": (f"{PROJECTIONS}.load", "batch sizes against throughput and latency, ar and the batched methods on the "
                                    "same batches"),
    "project-8b": (f"{PROJECTIONS}.project_8b", "latencies at Llama-3.1-8B shapes and projected speedups"),
    "engine-efficiency": (f"{DIAGNOSTICS}.engine_efficiency", "measured speedup over ar against the speedup the "
                                                              "measured forwards predict, at a fixed tau (an oracle "
                                                              "drafts), at a real shape"),
    "project-load": (f"{PROJECTIONS}.project_load", "the load study projected to a GPU latency table, per batch size"),
    "generation-throughput": (f"{CALIBRATIONS}.generation_throughput", "a chat target's answer tokens/s per batch "
                                                                       "size (regenerate.batch_size)"),
    "draft-vocab": (f"{CALIBRATIONS}.draft_vocab", "a drafter's drafting time per step over a reduced draft "
                                                   "vocabulary against the full one (SmolLM2's shape), with an A/A "
                                                   "control"),
    "dump-precision": (f"{CALIBRATIONS}.dump_precision", "one drafter family trained on a float32 feature dump and "
                                                         "on its float16 copy: held-out agreement per draft step, "
                                                         "the difference with a paired bootstrap interval, the "
                                                         "dumps' bytes on disk"),
    "workflow-time": ("harness.measure.workflow_time", "job-minutes per rule of a Snakemake run, from its logs over "
                                                       "every invocation, stopped intervals taken out"),
}
