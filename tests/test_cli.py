"""End to end through the CLI: records, pairing with ar, atomic output."""

import subprocess
import sys

import pytest

from harness.cli import main
from harness.store.records import SCHEMA_VERSION, atomic_jsonl, read_records, write_record


def test_run_sd_paired_with_ar(model_dirs, tmp_path, shared_data):
    out = tmp_path / "raw" / "sd.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--method", "sd", "--target", str(model_dirs["target"]),
         "--draft", str(model_dirs["draft"]), "--prompts", str(shared_data / "mt_bench"), "--limit", "3",
         "--max-new-tokens", "12", "--opt", "gamma=3", "--pair-with-ar", "--verifier", "traversal",
         "--out", str(out), "--no-progress"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    records = read_records(out)
    assert len(records) == 3 * 2 * 2  # prompts x turns x (sd, ar)
    assert not out.with_name(out.name + ".partial").exists()
    by_pair = {}
    for record in records:
        assert record["schema_version"] == SCHEMA_VERSION
        for key in ("method_options", "models", "dataset", "sampling", "seed", "dtype", "device", "versions",
                    "git_revision", "hardware", "timer", "output_ids", "output_text", "counters"):
            assert key in record, key
        assert record["graphs_captured"] == 0 and record["timing_reruns"] == 0  # no CUDA graphs here
        assert record["counters"]["new_tokens"] == len(record["output_ids"]) <= 12
        by_pair.setdefault(record["pair_id"], {})[record["method"]] = record
    assert len(by_pair) == 6
    for pair in by_pair.values():
        assert pair["sd"]["output_ids"] == pair["ar"]["output_ids"]  # greedy: lossless
        assert pair["sd"]["generation_seed"] == pair["ar"]["generation_seed"]
        assert pair["sd"]["method_options"] == {"drafts": "sampled", "gamma": 3, "length_file": ""} and pair["ar"]["role"] == "baseline"
        assert pair["sd"]["method_details"]["tree_parents"] == [-1, 0, 1, 2]  # a chain of gamma drafts
        assert pair["sd"]["variant"] == "sd" and pair["ar"]["variant"] == "ar"
        assert pair["sd"]["verifier"] == "traversal" and pair["ar"]["verifier"] == "token_level"  # ar: as always


def test_the_ar_control_pairs_ar_with_ar_and_summarizes_near_one(model_dirs, tmp_path, shared_data):
    """The A/A control: `ar` run as a variant paired with `ar`, interleaved; same tokens, both timed by phase."""
    out = tmp_path / "raw" / "ar_control.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--method", "ar", "--variant", "ar_control", "--target",
         str(model_dirs["target"]), "--prompts", str(shared_data / "mt_bench"), "--limit", "2",
         "--max-new-tokens", "8", "--pair-with-ar", "--out", str(out), "--no-progress"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    records = read_records(out)
    assert sorted(record["role"] for record in records) == ["baseline"] * 4 + ["method"] * 4
    assert {record["variant"] for record in records} == {"ar_control", "ar"}
    assert all(record["engine"]["kv_cache"] == "dynamic" for record in records)  # auto, resolved for the CPU
    for record in records:
        phases = record["counters"]["phase_seconds"]
        assert sum(phases.values()) == pytest.approx(record["counters"]["wall_seconds"]) and phases["drafter"] == 0
    from harness.analysis.summary import records_frame, summarize

    row = summarize(records_frame([out])).set_index("variant").loc["ar_control"]
    assert row.turns == 4 and row.tau == 1.0 and 0.3 < row.speedup_paired_mean < 3  # timed, paired
    assert row.speedup_ci_low <= row.speedup_paired_mean <= row.speedup_ci_high


def test_repeats_stratified_prompts_and_the_prompt_format(model_dirs, tmp_path, shared_data):
    """bench.repeats: the prompt set twice over (same seeds, same tokens), each run's speedup, mean +- std over runs;
    a stratified limit and a FastChat template with a system prompt are recorded with every turn."""
    out = tmp_path / "raw" / "sd.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--method", "sd", "--target", str(model_dirs["target"]),
         "--draft", str(model_dirs["draft"]), "--prompts", str(shared_data / "spec_bench"), "--category",
         "writing,translation,qa", "--limit", "3", "--stratify", "--chat-template", "vicuna", "--system-prompt",
         "Be brief.", "--repeats", "2", "--max-new-tokens", "6", "--pair-with-ar", "--out", str(out),
         "--no-progress"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    records = read_records(out)
    assert len(records) == 2 * (2 + 1 + 1) * 2  # repeats x turns (writing: 2, translation, qa) x (sd, ar)
    assert {record["category"] for record in records} == {"writing", "translation", "qa"}
    assert all(record["prompt_format"] == {"template": "vicuna", "system_prompt": "Be brief."} for record in records)
    runs = {repeat: sorted((r["pair_id"].split("~")[0], r["role"], r["output_ids"]) for r in records
                           if r["repeat"] == repeat) for repeat in (0, 1)}
    assert runs[0] == runs[1] and len({record["pair_id"] for record in records}) == 8
    from harness.analysis.summary import records_frame, summarize

    row = summarize(records_frame([out])).set_index("variant").loc["sd"]
    assert row.repeats == 2 and row.turns == 8 and row.speedup_repeat_std > 0
    from harness.analysis.specbench import export_records, read_answers

    written = {path.name for path in export_records(out, tmp_path / "specbench")}
    assert written == {"sd.jsonl", "sd.ar.jsonl", "sd.run2.jsonl", "sd.run2.ar.jsonl"}
    answers = read_answers(tmp_path / "specbench" / "sd" / "model_answer" / "sd.run2.jsonl")
    assert len(answers) == 3 and sum(len(line["choices"][0]["turns"]) for line in answers) == 4  # one run's turns


def test_methods_listing_imports_no_torch():
    """The listing reads every method's options from its torch-free options module (the catalog's ``options``)."""
    code = ("import sys; from harness.cli import main; main(['methods']); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "gamma=4" in result.stdout and "shape_file=''" in result.stdout and "experts=" in result.stdout


def test_train_help_lists_the_catalogs_trainable_methods(capsys):
    """`train --help` names the methods the catalog says need a trained drafter (read from it, not written out)."""
    from harness.catalog import methods_needing

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    trainable = methods_needing("drafter")
    assert len(trainable) > 5 and f"a method with a trained drafter: {', '.join(trainable)}" in shown


def test_every_catalog_options_class_is_its_methods():
    """The catalog's torch-free options class is the one ``METHOD`` builds from (no second declaration)."""
    from harness.catalog import method_names, options_type
    from harness.engine.method_spec import method_spec

    for name in method_names():
        assert method_spec(name).options is options_type(name), name


def test_atomic_jsonl_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "x.jsonl"
    with pytest.raises(RuntimeError):
        with atomic_jsonl(out) as handle:
            write_record(handle, {"schema_version": SCHEMA_VERSION})
            raise RuntimeError("killed")
    assert not out.exists() and not list(tmp_path.iterdir())
    with atomic_jsonl(out) as handle:
        write_record(handle, {"schema_version": SCHEMA_VERSION, "a": 1})
    assert read_records(out) == [{"schema_version": SCHEMA_VERSION, "a": 1}]


def test_planning_and_reporting_start_without_torch():
    """Every Snakemake call imports the planner, and the summary, figure, report and export jobs read records only:
    none of them may load torch or transformers (a few seconds per process, the bulk of a small job)."""
    code = ("import sys, contextlib, io\n"
            "from harness import workflow_plan, DraftcountError\n"
            "from harness.analysis import summary, figures, report, specbench, divergence, metrics\n"
            "from harness.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['summarize', '--help'])\n"
            "print(sorted(name for name in ('torch', 'transformers') if name in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    first_use = "import sys, harness; harness.SamplingConfig; print('torch' in sys.modules)"
    touched = subprocess.run([sys.executable, "-c", first_use], capture_output=True, text=True, timeout=120)
    assert touched.stdout.strip() == "True", touched.stderr  # the package's names still import on first use
