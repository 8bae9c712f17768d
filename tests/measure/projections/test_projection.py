"""The 8B-shape latency table and speedup projection, at 1/64 of the shapes on CPU."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from harness.engine.method_spec import Latencies
from harness.backend.timed import timing_cache
from harness.measure.calibrations.latency import batch_latencies, target_latencies, wide_tree
from harness.measure.projections.projection import drafting_seconds, project_speedups
from harness.measure.shapes import SHAPES, scaled_shape, shaped_llama
from methods.eagle.cost import step_latency as eagle_step_latency
from methods.lyanna.cost import step_latency as lyanna_depth_latency
from harness.backend.static_cache import static_layers

ROOT = Path(__file__).resolve().parents[3]


def test_latencies_at_scaled_shapes():
    shape = scaled_shape(SHAPES["llama-3.1-8b"], 64)
    assert shape["hidden_size"] == 64 and shape["num_hidden_layers"] == 1 and shape["vocab_size"] == 2004
    model = shaped_llama(shape, torch.float32, "cpu")
    latencies = target_latencies(model, prefix=32, sizes=[1, 8, 16], repeats=2)
    assert set(latencies) == {1, 8, 16} and all(seconds > 0 for seconds in latencies.values())
    assert eagle_step_latency(model, top_k=4, prefix=32, repeats=2) > 0
    assert lyanna_depth_latency(model, top_k=4, prefix=32, repeats=2) > 0
    assert eagle_step_latency(model, top_k=4, prefix=32, repeats=2, draft_vocab=64) > 0  # logits over 64 tokens
    assert lyanna_depth_latency(model, top_k=4, prefix=32, repeats=2, draft_vocab=64) > 0
    assert wide_tree(6, fan_out=2) == (-1, 0, 0, 1, 1, 2)
    # the same forwards on a preallocated KV cache (the static timing; CUDA graphs replay those on a GPU)
    static = target_latencies(model, prefix=32, sizes=[1, 16], repeats=2, timing="static")
    assert set(static) == {1, 16} and all(seconds > 0 for seconds in static.values())
    assert eagle_step_latency(model, top_k=4, prefix=32, repeats=2, timing="static") > 0
    assert lyanna_depth_latency(model, top_k=4, prefix=32, repeats=2, timing="static") > 0
    with pytest.raises(ValueError, match="timing must be one of"):
        target_latencies(model, prefix=32, sizes=[1], repeats=1, timing="graphs")
    batched = batch_latencies(model, prefix=32, sizes=[1, 8], batch_sizes=[1, 3], repeats=2)  # B rows of each size
    assert {rows: set(sizes) for rows, sizes in batched.items()} == {1: {1, 8}, 3: {1, 8}}
    assert all(seconds > 0 for sizes in batched.values() for seconds in sizes.values())
    assert static_layers(timing_cache(model.config, 8, torch.float32, torch.device("cpu"), "eager")) is None
    for timing in ("static", "cuda_graphs"):  # cuda_graphs replays forwards on the same preallocated cache
        assert len(static_layers(timing_cache(model.config, 8, torch.float32, torch.device("cpu"), timing))) == 1


def test_cost_models_and_projection_by_hand(tmp_path):
    latencies = Latencies(target={1: 0.010, 32: 0.020}, draft_lm={1: 0.002, 16: 0.004}, top_k=4,
                          drafter_steps={"eagle_step": 0.001, "lyanna_depth": 0.0005})
    assert drafting_seconds("ar", {}, latencies) == 0
    assert drafting_seconds("sd", {"gamma": 4}, latencies) == pytest.approx(0.008)
    # levels 4, 8, 16, 16 wide: fed are the root, then 4, 8 and 16 nodes (the last level's 16 leaves are not)
    tree = drafting_seconds("tree_sd", {"branching": [4, 2, 2, 1]}, latencies)
    assert tree == pytest.approx(0.002 + (0.002 + 3 / 15 * 0.002) + (0.002 + 7 / 15 * 0.002) + 0.004)
    sequoia = tmp_path / "tree.json"
    sequoia.write_text(json.dumps({"parents": [-1, 0, 0, 1, 1, 3]}))  # levels 2, 2, 1 wide
    assert drafting_seconds("tree_sd", {"policy": "sequoia", "tree_file": str(sequoia), "branching": [9]},
                            latencies) == pytest.approx(0.002 + 2 * (0.002 + 1 / 15 * 0.002))
    assert drafting_seconds("eagle", {"depth": 5}, latencies) == pytest.approx(0.006)
    assert drafting_seconds("lyanna", {"depth": 5}, latencies) == pytest.approx(0.003)
    assert math.isnan(drafting_seconds("tree_sd", {"policy": "sequoia", "tree_file": "missing.json"}, latencies))
    summary = pd.DataFrame([
        {"variant": "ar", "method": "ar", "dataset": "d", "temperature": 0.0, "tau": 1.0, "accepted_per_step": 0.0,
         "verified_per_step": 1.0, "options": "{}", "speedup_paired_mean": 1.0},
        {"variant": "lyanna", "method": "lyanna", "dataset": "d", "temperature": 0.0, "tau": 2.9,
         "accepted_per_step": 2.0, "verified_per_step": 32.0, "options": json.dumps({"depth": 5}),
         "speedup_paired_mean": 0.6},
    ])
    projection = project_speedups(summary, latencies).set_index("variant")
    assert projection.loc["ar"].projected_speedup == pytest.approx(1.0)
    assert projection.loc["lyanna"].projected_speedup == pytest.approx(3 * 0.010 / (0.003 + 0.020))
    assert projection.loc["lyanna"].measured_speedup == 0.6


def test_projection_script_on_the_committed_summary(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "harness", "measure", "project-8b", "--summary", "results/tables/summary.csv",
         "--out-dir", str(tmp_path), "--device", "cpu", "--dtype", "float32", "--scale", "64", "--prefix", "32",
         "--sizes", "1,8,16", "--repeats", "1", "--top-k", "4", "--threads", "1", "--timing", "eager,static"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    latency = pd.read_csv(tmp_path / "latency.csv")
    # every catalog drafter with a cost model of its own (prism's and mtp's step is eagle's, dspark's dflash's;
    # polybasic has none)
    assert set(latency.component) == {"target", "draft_lm", "eagle_step", "lyanna_depth", "owl_step", "dflash_step",
                                      "medusa_head", "dream_step"}
    assert latency.groupby("timing").size().to_dict() == {"eager": 12, "static": 12}  # 3 + 3 sizes, 6 drafters
    projection = pd.read_csv(tmp_path / "projection.csv")
    assert projection.basis.str.startswith("projection: Llama-3.1-8B shapes / 64").all()
    assert (projection[projection.variant == "ar"].projected_speedup == 1.0).all()
    assert projection[projection.variant.isin(["sd", "eagle", "lyanna"])].projected_speedup.gt(0).all()
    assert (tmp_path / "projection.png").stat().st_size > 10_000


def test_the_figure_is_redrawn_from_the_committed_projection(tmp_path):
    from harness.measure.projections.project_8b import main

    main(["--from-projection", str(ROOT / "results/h100-2026-11-24/projection/projection.csv"), "--out-dir",
          str(tmp_path)])  # no summary, no GPU: the written table's last timing (CUDA graphs) drawn again
    assert (tmp_path / "projection.png").stat().st_size > 10_000 and not (tmp_path / "latency.csv").exists()
