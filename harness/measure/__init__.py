"""Measurements behind ``python -m harness measure <name>``: our ``ar`` against ``generate()``, the overhead
switches, step costs, the host-sync audit, the 8B-shape projection; and the latency and acceptance measurements
Sequoia's tree is chosen from.

``MEASUREMENTS`` maps each subcommand to the module whose ``main(argv)`` runs it.
"""

from __future__ import annotations

MEASUREMENTS: dict[str, tuple[str, str]] = {
    "ar-vs-generate": ("harness.measure.ar_vs_generate", "our ar against model.generate() on the same model"),
    "bare-loop": ("harness.measure.bare_loop", "our ar against a bare model(...) decode loop, with an A/A control"),
    "overheads": ("harness.measure.overheads", "each overhead switch against its absence, interleaved"),
    "step-costs": ("harness.measure.step_costs", "seconds of each phase of a decoding step, per method"),
    "dispatch": ("harness.measure.dispatch", "ATen ops a decoding step dispatches outside graphed forwards, by phase, "
                                             "per method (each about one kernel launch in eager CUDA)"),
    "host-sync": ("harness.measure.host_sync_audit", "host synchronisations per decoding step, per method"),
    "static-tree": ("harness.measure.static_tree", "a static tree pruned to the nodes most accepted on calibration "
                                                   "prompts (stand)"),
    "verifiers": ("harness.measure.verifier_acceptance", "every verifier on the same trees: expected accepted "
                                                          "drafts per step"),
    "tree-shape": ("harness.measure.tree_shape", "the depth and budget of highest estimated tokens/s for a beam "
                                                 "drafter on this machine (budget: auto)"),
    "chain-length": ("harness.measure.chain_length", "the chain length of highest estimated tokens/s for sd, pard "
                                                     "or dflash on this machine (gamma: auto, k: auto, "
                                                     "verify_length: auto)"),
    "load": ("harness.measure.load", "batch sizes against throughput and latency, ar and the batched methods on the "
                                     "same batches"),
    "project-8b": ("harness.measure.project_8b", "latencies at Llama-3.1-8B shapes and projected speedups"),
    "engine-efficiency": ("harness.measure.engine_efficiency", "measured speedup over ar against the speedup the "
                                                               "measured forwards predict, at a fixed tau (an oracle "
                                                               "drafts), at a real shape"),
    "project-load": ("harness.measure.project_load", "the load study projected to a GPU latency table, per batch size"),
    "generation-throughput": ("harness.measure.generation_throughput",
                              "a chat target's answer tokens/s per batch size (regenerate.batch_size)"),
    "draft-vocab": ("harness.measure.draft_vocab", "a drafter's drafting time per step over a reduced draft vocabulary "
                                                   "against the full one (SmolLM2's shape), with an A/A control"),
    "dump-precision": ("harness.measure.dump_precision", "one drafter family trained on a float32 feature dump and "
                                                         "on its float16 copy: held-out agreement per draft step, "
                                                         "the difference with a paired bootstrap interval, the "
                                                         "dumps' bytes on disk"),
    "workflow-time": ("harness.measure.workflow_time", "job-minutes per rule of a Snakemake run, from its logs over "
                                                       "every invocation, stopped intervals taken out"),
}
