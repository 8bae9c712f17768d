"""The whole pipeline in one command, without Snakemake: for a bare GPU machine (torch, transformers, pandas,
matplotlib) where the workflow cannot be installed.

    python workflow/scripts/gpu_check.py --out /tmp/gpu_check                       # workflow/config/gpu_check.yaml
    python workflow/scripts/gpu_check.py --out /tmp/check --config workflow/config/default.yaml \
        workflow/config/smoke.yaml --device cpu                                     # the smoke pipeline on CPU

It runs the workflow's own steps in the workflow's order, all in this one process: the rule scripts under
workflow/scripts (given the inputs, outputs and params their rules would give them), then `python -m harness
train` for every drafter, `python -m harness run` for every variant x dataset x temperature (the commands of
harness/workflow_plan.py, the same the rules run), and summarize / figures / report. Config files are merged in order like
Snakemake's --configfile; bench.device/dtype may be overridden. A step whose outputs exist is skipped, so
a killed check resumes. It prints the seconds each step took, and writes everything under --out:
work/ (corpus, models, drafters) and results/ (raw records, tables, figures, report.md).

After the report it measures what the GPU issue asks for, into results/tables/: divergence.csv (how often the
bf16 greedy outputs leave ar, and where), lossless_float32_eager.csv and lossless_float32_graphs.csv (every
method in float32, eager and with static caches + CUDA graphs; a step fails if any output differs from ar),
ar_vs_generate_*.txt (our ar against model.generate(): eager, static cache, CUDA graphs against its default;
static against its static cache; on CUDA with compile, graphs against its compiled static cache) with
ar_vs_generate_profile.csv (both eager loops' ops per token, profiled), overheads.csv (each
overhead switch against its absence, every method, interleaved), host_sync.csv (host synchronisations per
decoding step), summary_graphs.csv (the whole benchmark again on static caches + CUDA graphs; on CPU:
summary_static.csv, static caches) and, last, overheads_compile.csv (torch.compile against eager). These steps are soft: one that fails is
reported (failed_steps.json, exit status 1) and the others still run; what a failed step wrote is renamed
*.failed, so a rerun runs it again. --extra-prompts 0 skips them. step_seconds.json and failed_steps.json are
rewritten after every step and kept over resumed runs (a failure stays listed until its step runs again).

--only PART[,PART] runs only some parts after training the zoo (which all need): bench (the benchmark up to
the report, and divergence), lossless, ar_vs_generate, overheads, host_sync, engine_pass. A session with
little GPU time left runs the parts it still owes, into the same --out, say

    python workflow/scripts/gpu_check.py --out /tmp/gpu_check --no-compile --only ar_vs_generate,overheads
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness import workflow_plan as plan  # noqa: E402
from harness.errors import DraftcountError  # noqa: E402
from harness.check_parts import GROUPS, parse_groups  # noqa: E402
from harness.config_files import merge, read_configs  # noqa: E402
from harness.pipeline_steps import Check, StepLedger  # noqa: E402

SCRIPTS = ROOT / "workflow" / "scripts"
NEEDS_DRAFT_LM, NEEDS_DRAFTER = plan.NEEDS_DRAFT_LM, plan.NEEDS_DRAFTER
PROFILE_TRIALS = 2  # timed trials before the op profile (the eager comparison step times one per extra prompt)


def run_check(config: dict, out: Path, threads: int, extras: Extras, groups: frozenset[str] = frozenset(GROUPS),
              after_step: Callable[[Check], object] | None = None) -> Check:
    """Train the zoo, then run the ``groups`` (see GROUPS) of the check; steps whose outputs exist are skipped.
    ``after_step(check)`` runs after every step that ran."""
    check = Check(config, out, threads, SCRIPTS, after_step)
    w, device = check.w, str(config["bench"].get("device", "cpu"))
    dtype = config["bench"].get("dtype", "float32")
    corpus = {"train": w("data/corpus/train.jsonl"), "heldout": w("data/corpus/heldout.jsonl"),
              "summary": w("data/corpus/corpus.json")}
    check.script("corpus", "build_corpus.py", {}, corpus, {"corpus": config["corpus"]})
    check.script("tokenizer", "train_tokenizer.py", {"train": corpus["train"]}, [w("models/tokenizer")],
                 {"tokenizer": config["tokenizer"]})
    for split in ("train", "heldout"):
        check.script(f"tokenize {split}", "tokenize_corpus.py",
                     {"tokenizer": w("models/tokenizer"), "documents": corpus[split]}, [w(f"data/tokens/{split}.pt")],
                     wildcards={"split": split})
    lm_inputs = {"tokenizer": w("models/tokenizer"), "train": w("data/tokens/train.pt"),
                 "heldout": w("data/tokens/heldout.pt"), "corpus": corpus["summary"]}
    for role, extra in (("target", {}), ("draft", {"teacher": w("models/target")})):
        check.script(f"train {role}", "train_lm.py", {**lm_inputs, **extra},
                     {"model": w(f"models/{role}"), "metrics": w(f"metrics/{role}.json")},
                     {"role": role, "model": config[role], "evaluation": config["evaluation"],
                      "checkpoint": w(f"checkpoints/{role}.pt"), "device": device})
    check.script("dump features", "dump_features.py", {"target": w("models/target"), "train": lm_inputs["train"]},
                 {"index": w("features/target/index.json")},
                 {"features": config["features"], "device": device, "dtype": dtype})
    check.script("code prompts", "make_code_prompts.py", {"heldout": corpus["heldout"]},
                 [w("prompts/stdlib_code.jsonl")], {"prompts": config["prompts"]})
    variants = plan.variant_names(config)
    trees = {(t, str(options.get("tree_budget", "auto"))) for v in variants
             for options in [config["bench"]["methods"][v]] if options.get("tree_file") == "auto"
             for t in plan.temperature_names(config)}
    tree_readers = {"bench", "lossless", "engine_pass"} if extras.prompts else {"bench"}  # parts running its variants
    if trees and groups & tree_readers:
        models = {"target": w("models/target"), "draft": w("models/draft")}
        check.script("measure latency", "measure_latency.py", models, [w("tree/latency.json")],
                     {"tree": config["tree_search"], "device": device, "dtype": dtype})
        for temperature in sorted({t for t, _ in trees}):
            check.script(f"measure acceptance t{temperature}", "measure_acceptance.py",
                         {**models, "heldout": w("data/tokens/heldout.pt")}, [w(f"tree/acceptance-t{temperature}.json")],
                         {"tree": config["tree_search"]}, {"temperature": temperature})
        for temperature, budget in sorted(trees):
            check.script(f"sequoia tree t{temperature} b{budget}", "sequoia_tree.py",
                         {"acceptance": w(f"tree/acceptance-t{temperature}.json"), "latency": w("tree/latency.json")},
                         [w(f"tree/sequoia-t{temperature}-b{budget}.json")], {"tree": config["tree_search"]},
                         {"budget": budget})
    drafters = sorted({plan.variant_drafter(config, v) for v in variants
                       if plan.variant_method(config, v) in NEEDS_DRAFTER})
    for drafter in drafters:
        data = w("features/target") if config["drafters"][drafter].get("data", "features") == "features" \
            else w("data/tokens/train.pt")
        arguments = plan.train_arguments(config, drafter, w("models/target"), data, w("data/tokens/heldout.pt"))
        check.command(f"train drafter {drafter}", ["train", *arguments,
            "--checkpoint", w(f"checkpoints/drafter-{drafter}.pt"), "--threads", str(threads), "--no-progress",
            "--out", w(f"drafters/{drafter}"), "--metrics", w(f"metrics/drafter-{drafter}.json")],
            [w(f"drafters/{drafter}")])
    greedy_records = bench_and_report(check, config, drafters) if "bench" in groups else []
    if extras.prompts:
        run_extras(check, config, extras, greedy_records, drafters, groups)
    return check


def bench_and_report(check: Check, config: dict, drafters: list[str]) -> list[str]:
    """Every variant at every temperature, then the summary, figures and report; returns the greedy records."""
    w = check.w
    records, greedy_records = bench_variants(check, config, "raw", "")
    tables = check.results / "tables"
    summary, depth = str(tables / "summary.csv"), str(tables / "depth_acceptance.csv")
    main = ",".join(plan.main_variants(config))
    check.command("summary", ["summarize", *records, "--out", summary, "--depth-out", depth], [summary])
    figures = check.results / "figures"
    check.command("figures", ["figures", "--summary", summary, "--depth", depth, "--out-dir", str(figures),
                              "--main", main], [str(figures / "efficiency.png")])
    metrics = [w("metrics/target.json"), w("metrics/draft.json")] + [w(f"metrics/drafter-{d}.json") for d in drafters]
    report = str(check.results / "report.md")
    check.command("report", ["report", *records, "--summary", summary, "--figures", str(figures), "--metrics",
                             *metrics, "--main", main, "--out", report], [report])
    return greedy_records


def bench_variants(check: Check, config: dict, raw: str, label: str) -> tuple[list[str], list[str]]:
    """`python -m harness run` for every variant x dataset x temperature into results/<raw>/; returns the
    records, and those at temperature 0."""
    records, greedy_records = [], []
    for variant in plan.variant_names(config):
        method = plan.variant_method(config, variant)
        for dataset in plan.variant_datasets(config, variant):
            for temperature in plan.temperature_names(config):
                out_file = str(check.results / raw / variant / f"{dataset}-t{temperature}.jsonl")
                arguments = plan.run_arguments(
                    config, variant, dataset, temperature, check.work, check.w("models/target"),
                    check.w("models/draft") if method in NEEDS_DRAFT_LM else None,
                    check.w(f"drafters/{plan.variant_drafter(config, variant)}") if method in NEEDS_DRAFTER else None)
                check.command(f"bench{label} {variant} {dataset} t{temperature}",
                              ["run", *arguments, "--threads", str(check.threads), "--no-progress", "--out", out_file],
                              [out_file])
                records.append(out_file)
                if temperature == "0":
                    greedy_records.append(out_file)
    return records, greedy_records


def bench_engine_pass(check: Check, config: dict, label: str, engine: dict[str, str]) -> None:
    """The benchmark again with every run on ``engine`` (the overhead switches on), summarised into
    tables/summary_<label>.csv: item 1's figures as a serving engine would run the methods."""
    switched = merge(json.loads(json.dumps(config)), {"bench": {"engine": engine}})
    records, _ = bench_variants(check, switched, f"raw-{label}", f" ({label})")
    summary = str(check.results / "tables" / f"summary_{label}.csv")
    check.records_command(f"summary ({label})", records, ["summarize", "--out", summary], [summary])


@dataclass(frozen=True)
class Extras:
    """Sizes of the checks after the report (issue 8's measurements); prompts = 0 skips them."""

    prompts: int = 6
    new_tokens: int = 128
    overhead_settings: str = ""  # empty: bench_overheads.py's default for the device
    compile: bool = True  # on CUDA, also torch.compile against eager (a step of its own)


GRAPHED = ["--engine", "kv_cache=static", "--engine", "cuda_graphs=on"]


def float32_lossless(check: Check, config: dict, extras: Extras, label: str, engine: list[str]) -> None:
    """Every main method in float32 at temperature 0, paired with ar; fails the step if any output differs."""
    w, tables = check.w, check.results / "tables"
    exact = merge(json.loads(json.dumps(config)), {"bench": {"dtype": "float32", "limit": extras.prompts,
                                                             "max_new_tokens": extras.new_tokens}})
    records = []
    for variant in plan.main_variants(config):
        method = plan.variant_method(config, variant)
        if method == "ar":
            continue
        dataset = plan.variant_datasets(config, variant)[0]
        out_file = str(check.results / f"raw-float32-{label}" / f"{variant}.jsonl")
        arguments = plan.run_arguments(
            exact, variant, dataset, "0", check.work, w("models/target"),
            w("models/draft") if method in NEEDS_DRAFT_LM else None,
            w(f"drafters/{plan.variant_drafter(config, variant)}") if method in NEEDS_DRAFTER else None)
        check.command(f"float32 {label} {variant}", ["run", *arguments, *engine, "--threads", str(check.threads),
                                                     "--no-progress", "--out", out_file], [out_file])
        records.append(out_file)
    lossless = str(tables / f"lossless_float32_{label}.csv")
    check.records_command(f"float32 lossless ({label})", records, ["divergence", "--expect-identical", "--out",
                                                                   lossless], [lossless])


def ar_vs_generate(check: Check, extras: Extras, model: list[str], label: str, arguments: list[str],
                   outputs: tuple[str, ...] = (), trials: int | None = None) -> None:
    """Our ar against model.generate() (bench_ar_vs_generate.py), its printout kept as ar_vs_generate_<label>.txt;
    ``trials`` interleaved timings (default: one per extra prompt)."""
    log = str(check.results / "tables" / f"ar_vs_generate_{label}.txt")
    check.tool(f"ar vs generate() ({label})", "bench_ar_vs_generate.py",
               ["--model", check.w("models/target"), *model, "--trials", str(trials or extras.prompts),
                "--new-tokens", str(extras.new_tokens), *arguments], [log, *outputs], log)


def release_compiled() -> None:
    """Drop what a compiling step left in this process (dynamo's caches and their CUDA-graph memory pools), so
    that the next step starts as clean as the others."""
    import torch

    torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_extras(check: Check, config: dict, extras: Extras, greedy_records: list[str], drafters: list[str],
               groups: frozenset[str] = frozenset(GROUPS)) -> None:
    """bf16 divergence from ar, float32 lossless (eager and, on CUDA, graphed), ar vs generate(), the overhead
    switches, the host-sync audit, the benchmark on the switches: those of ``groups``. Each is a soft step: a
    failure is reported at the end, the rest still run."""
    w, tables = check.w, check.results / "tables"
    device, dtype = str(config["bench"].get("device", "cpu")), config["bench"].get("dtype", "float32")
    cuda = device.startswith("cuda")
    compile_too = cuda and extras.compile
    model = ["--device", device, "--dtype", dtype]
    models = ["--target", w("models/target"), "--draft", w("models/draft")]
    models += [item for name in ("eagle", "lyanna") if name in drafters for item in (f"--{name}", w(f"drafters/{name}"))]

    def overheads(name: str, settings: list[str]) -> None:
        check.tool(name.replace("_", " "), "bench_overheads.py",
                   [*models, *model, "--prompts", w("prompts/stdlib_code.jsonl"), "--limit", str(extras.prompts),
                    "--max-new-tokens", str(extras.new_tokens), "--no-progress", *settings,
                    "--out", str(tables / f"{name}.csv")], [str(tables / f"{name}.csv")], str(tables / f"{name}.txt"))

    check.soft = True
    if "bench" in groups:
        check.command("divergence", ["divergence", *greedy_records, "--out", str(tables / "divergence.csv")],
                      [str(tables / "divergence.csv")])
    if "lossless" in groups:
        float32_lossless(check, config, extras, "eager", [])
        float32_lossless(check, config, extras, "graphs" if cuda else "static",
                         GRAPHED if cuda else ["--engine", "kv_cache=static"])
    if "ar_vs_generate" in groups:
        static = ["--engine", "kv_cache=static"]
        comparisons = [("eager", []), ("static", static), ("static_vs_static", [*static, "--reference", "static"])]
        for label, arguments in comparisons + ([("graphs", GRAPHED)] if cuda else []):
            ar_vs_generate(check, extras, model, label, arguments)
        profile = str(tables / "ar_vs_generate_profile.csv")  # a step of its own: a profiler failure loses only this
        # the eager comparison's timings are its own step's: this one times PROFILE_TRIALS, then profiles
        ar_vs_generate(check, extras, model, "profile", ["--profile-out", profile], (profile,), PROFILE_TRIALS)
    if "overheads" in groups:
        overheads("overheads", ["--settings", extras.overhead_settings] if extras.overhead_settings else [])
    if "host_sync" in groups:
        check.tool("host-sync audit", "audit_host_sync.py",
                   [*models, *model, "--kv-cache", "static", "--max-new-tokens", str(min(extras.new_tokens, 64)),
                    "--out", str(tables / "host_sync.csv")], [str(tables / "host_sync.csv")])
    if "engine_pass" in groups:  # on CPU the same pass with what a CPU has (a static cache), so that it is tested
        bench_engine_pass(check, config, "graphs" if cuda else "static",
                          {"kv_cache": "static", "cuda_graphs": "on"} if cuda else {"kv_cache": "static"})
    # last, the compiled measurements: compiling takes the longest, so a check cut off by time loses only these
    if compile_too and "ar_vs_generate" in groups:
        ar_vs_generate(check, extras, model, "graphs_vs_compiled", [*GRAPHED, "--reference", "compiled"])
        release_compiled()
    if compile_too and "overheads" in groups:
        overheads("overheads_compile", ["--settings", "eager,compile"])
    check.soft = False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="folder for work/ and results/")
    parser.add_argument("--config", nargs="+", type=Path,
                        default=[ROOT / "workflow/config/default.yaml", ROOT / "workflow/config/gpu_check.yaml"],
                        help="config files, merged in order (default: default.yaml, gpu_check.yaml)")
    parser.add_argument("--device", help="override bench.device (models train and run there)")
    parser.add_argument("--dtype", help="override bench.dtype")
    parser.add_argument("--threads", type=int, default=4, help="torch CPU threads per step")
    parser.add_argument("--extra-prompts", type=int, default=Extras.prompts,
                        help="prompts (trials) of the checks after the report: float32 lossless, ar vs generate(), "
                             "overhead switches, host-sync audit (0: skip them)")
    parser.add_argument("--extra-tokens", type=int, default=Extras.new_tokens, help="new tokens in those checks")
    parser.add_argument("--overhead-settings", default="",
                        help="bench_overheads.py --settings (default: eager,static_cache and on CUDA "
                             "graphs_verify,cuda_graphs)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile measurement (CUDA)")
    parser.add_argument("--only", metavar="PART[,PART]",
                        help="run only these parts after training the zoo (default: all): " +
                             "; ".join(f"{name}: {what}" for name, what in GROUPS.items()))
    args = parser.parse_args()
    try:
        groups = parse_groups(args.only, args.extra_prompts)
    except ValueError as error:
        parser.error(str(error))
    try:
        config = read_configs(args.config)
    except DraftcountError as error:
        parser.error(str(error))
    for key, value in (("device", args.device), ("dtype", args.dtype)):
        if value:
            config["bench"][key] = value
    started = time.perf_counter()
    ledger = StepLedger(args.out)  # step_seconds.json, failed_steps.json: kept over resumed runs
    check = run_check(config, args.out, args.threads,
                      Extras(args.extra_prompts, args.extra_tokens, args.overhead_settings, not args.no_compile),
                      groups, ledger.write)
    failed = ledger.write(check)
    print(json.dumps({name: round(value, 1) for name, value in check.seconds.items()}, indent=1))
    report = args.out / "results" / "report.md"
    print(f"gpu_check: {time.perf_counter() - started:.0f} s in all" + (f"; report: {report}" if report.is_file()
                                                                         else ""))
    if failed:  # this run's failures and earlier ones of steps it did not run again
        raise SystemExit("gpu_check: these steps failed (the others ran): " + "; ".join(failed))


if __name__ == "__main__":
    main()
