"""harness/op_profile.py: two runs profiled op by op and compared per generated token."""

import pandas as pd
import pytest
import torch

from harness.measure.diagnostics.op_profile import (HOST_OPS, OUTSIDE_OPS, SUMMARY_ROWS, WALL, OpCost, RunProfile,
                                                    compare_per_token, format_rows, profile_ops, write_rows)


def test_profile_counts_the_ops_a_run_calls():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    profile = profile_ops(lambda: [a @ b for _ in range(3)], torch.device("cpu"))
    assert profile.ops["aten::mm"].calls == 3 and profile.ops["aten::mm"].self_cpu_us > 0
    assert profile.ops["aten::mm"].self_device_us == 0.0 and not profile.ops["aten::mm"].on_device
    assert profile.wall_us >= profile.ops["aten::mm"].self_cpu_us


def test_comparison_is_per_token_with_summary_rows_first_and_largest_difference_next(tmp_path):
    # a kernel's device time is credited to the op that launched it too: the totals count it once
    ours = RunProfile({"aten::mm": OpCost(20, 200.0, 50.0), "aten::alias": OpCost(40, 80.0, 0.0),
                       "gemm_kernel": OpCost(20, 0.0, 50.0, on_device=True)}, wall_us=500.0)
    theirs = RunProfile({"aten::mm": OpCost(20, 180.0, 0.0), "aten::eq": OpCost(10, 10.0, 5.0)}, wall_us=300.0)
    rows = compare_per_token(ours, theirs, ours_tokens=10, theirs_tokens=10)
    assert [row["op"] for row in rows] == [*SUMMARY_ROWS, "aten::alias", "aten::mm", "aten::eq", "gemm_kernel"]
    by_op = {row["op"]: row for row in rows}
    assert by_op[WALL]["ours_self_cpu_us"] == 50.0 and by_op[WALL]["generate_self_cpu_us"] == 30.0
    assert by_op[HOST_OPS]["ours_calls"] == 6.0 and by_op[HOST_OPS]["generate_calls"] == 3.0
    assert by_op[HOST_OPS]["ours_self_cpu_us"] == 28.0 and by_op[HOST_OPS]["ours_self_device_us"] == 5.0
    assert by_op[OUTSIDE_OPS]["ours_self_cpu_us"] == pytest.approx(50.0 - 28.0)
    assert by_op[OUTSIDE_OPS]["self_cpu_us_difference"] == pytest.approx(22.0 - 11.0)
    assert by_op["aten::alias"]["ours_self_cpu_us"] == 8.0 and by_op["aten::alias"]["generate_calls"] == 0.0
    assert by_op["aten::eq"]["generate_self_device_us"] == 0.5
    write_rows(rows, tmp_path / "ops.csv")
    assert list(pd.read_csv(tmp_path / "ops.csv").op) == [row["op"] for row in rows]
    assert len(format_rows(rows, limit=1).splitlines()) == 1 + len(SUMMARY_ROWS) + 1  # header, summary, top one
    with pytest.raises(ValueError, match="generate tokens"):
        compare_per_token(ours, theirs, 0, 10)


def test_generate_references_run_the_cache_they_name(random_pair):
    """measure ar-vs-generate's --reference: `static` and `compiled` make generate() decode on a static cache
    (compile off for `static`; on a CPU neither compiles), `default` on its DynamicCache."""
    from transformers import DynamicCache, StaticCache

    references = _bench_script()["REFERENCES"]
    target, _ = random_pair
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    caches = {}
    with torch.inference_mode():
        for name, keywords in references.items():
            out = target.model.generate(prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0,
                                        return_dict_in_generate=True, **keywords)
            caches[name] = type(out.past_key_values)
    assert caches == {"default": DynamicCache, "static": StaticCache, "compiled": StaticCache}
    assert references["static"]["disable_compile"] and "disable_compile" not in references["compiled"]


def _bench_script() -> dict:
    from harness.measure.diagnostics import ar_vs_generate

    return vars(ar_vs_generate)


def test_random_shape_is_the_configured_target(tmp_path):
    """measure ar-vs-generate --random-shape: the merged config's target shape and vocabulary (the GPU profile's
    171M target over the defaults); bad files are named."""
    from pathlib import Path

    from harness.errors import DraftcountError
    from harness.training.zoo import ModelShape

    bench = _bench_script()
    config = Path(__file__).resolve().parents[3] / "workflow" / "config"
    shape, vocab = bench["config_target_shape"]([config / "default.yaml", config / "gpu.yaml"])
    assert shape == ModelShape(hidden_size=1024, num_layers=12, num_heads=16, intermediate_size=2816, context=2048)
    assert vocab == 8192
    default, _ = bench["config_target_shape"]([config / "default.yaml"])
    assert default.num_layers == 16 and default.hidden_size == 256  # the grown target, as benchmarked
    small = ModelShape(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, context=128)
    model = bench["random_llama_shaped"](small, 100)
    embeddings, layer, norm = 2 * 100 * 32, 4 * 32 * 32 + 3 * 32 * 64 + 2 * 32, 32  # untied input/output
    assert sum(p.numel() for p in model.parameters()) == embeddings + 2 * layer + norm
    assert model.config.eos_token_id is None and model.config.max_position_embeddings == 128
    (tmp_path / "no_vocab.yaml").write_text("target: {shape: {hidden_size: 32}}\n")
    (tmp_path / "bad_shape.yaml").write_text("tokenizer: {vocab_size: 9}\ntarget: {shape: {width: 32}}\n")
    with pytest.raises(DraftcountError, match="no config file"):
        bench["config_target_shape"]([tmp_path / "missing.yaml"])
    with pytest.raises(DraftcountError, match="tokenizer.vocab_size"):
        bench["config_target_shape"]([tmp_path / "no_vocab.yaml"])
    with pytest.raises(DraftcountError, match="width"):
        bench["config_target_shape"]([tmp_path / "bad_shape.yaml"])
