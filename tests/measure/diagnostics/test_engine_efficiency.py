"""measure engine-efficiency at a tiny shape on the CPU: every method drafts with its own code and a random drafter of
its real shape, the oracle fixes what a step emits exactly, every output is the target's continuation, and the table's
efficiency is the measured speedup over the predicted one."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from harness.engine.method_spec import Latencies
from harness.errors import DraftcountError
from harness.measure.diagnostics.engine_efficiency import VARIANTS, Run, efficiency_rows, main
from harness.measure.projections.projection import projected_speedup

TINY = ["--scale", "64", "--threads", "1", "--prompt-tokens", "12", "--new-tokens", "16", "--repeats", "2"]


def test_every_method_emits_exactly_tau_a_step_and_the_table_divides_measured_by_predicted(tmp_path):
    out = tmp_path / "efficiency.csv"
    assert main([*TINY, "--trials", "1", "--taus", "2,3.5,6", "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert list(table.variant.unique()) == list(VARIANTS) and len(table) == 3 * len(VARIANTS)
    whole = table[table.tau != 3.5]
    assert (whole.tau_measured == whole.tau).all()  # exactly: tau - 1 drafts accepted every step
    halves = table[table.tau == 3.5].tau_measured  # 1 and 2 drafts in turns: 3.5 up to an odd last step
    assert halves.between(3.3, 3.5).all()
    assert (table.identical == "2/2").all()  # each run's and ar's output: the target's continuation
    assert (table.predicted_speedup > 0).all() and (table.measured_speedup > 0).all()
    assert np.allclose(table.efficiency, table.measured_speedup / table.predicted_speedup, rtol=0.01, atol=2e-3)
    trees = table.set_index("variant").verified_per_step
    assert trees["eagle_tree"].eq(60).all() and trees["eagle_chain"].eq(7).all() and trees["sd"].eq(6).all()


def test_efficiency_rows_pair_each_run_with_ar_on_its_trial():
    latencies = Latencies({1: 0.010, 6: 0.012}, {1: 0.002}, 1)
    runs = [Run("ar", 1.0, 1, 1.0, 100, 100, 0, 0, True), Run("ar", 1.0, 2, 2.0, 100, 100, 0, 0, True),
            Run("sd", 3.0, 1, 0.5, 100, 33, 66, 165, True), Run("sd", 3.0, 2, 0.5, 100, 33, 66, 165, False)]
    [row] = efficiency_rows(runs, {"sd": ("sd", {"gamma": 5})}, {"sd": latencies}, {"shape": "x"})
    assert row["measured_speedup"] == pytest.approx(math.sqrt(2.0 * 4.0), abs=1e-3)
    assert row["tau_measured"] == pytest.approx(3.0, abs=1e-3) and row["verified_per_step"] == 6.0
    assert row["draft_ms"] == pytest.approx(10.0)  # gamma draft-LM forwards of one token
    predicted = projected_speedup(3.0, 6.0, 0.010, latencies)
    assert row["predicted_speedup"] == pytest.approx(predicted, abs=1e-3) == 3 * 0.010 / (0.010 + 0.012)
    assert row["efficiency"] == pytest.approx(row["measured_speedup"] / predicted, abs=1e-2)
    assert row["identical"] == "3/4" and row["trials"] == 2 and row["shape"] == "x"


@pytest.mark.parametrize("arguments,message", [(["--variants", "eagle,medusa"], "--variants takes"),
                                               (["--taus", "2,x"], "--taus takes"),
                                               (["--taus", "0.5"], "need taus >= 1")])
def test_bad_arguments_are_one_line(arguments, message, capsys):
    with pytest.raises(SystemExit):
        main([*TINY, *arguments])
    assert message in capsys.readouterr().err


def test_a_deadline_no_trial_fits_says_so():
    with pytest.raises(DraftcountError, match="no timed trial finished within the deadline"):
        main([*TINY, "--variants", "sd", "--taus", "2", "--deadline", "0.001"])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_oracle_holds_tau_under_cuda_graphs_in_bfloat16(tmp_path):
    """The same in bfloat16 under the CUDA default (static caches, CUDA graphs): the decisive target's choice survives
    a tree forward's rounding, and the oracle's device-side rewrite runs inside the captured engine."""
    out = tmp_path / "efficiency.csv"
    assert main(["--scale", "16", "--device", "cuda", "--dtype", "bfloat16", "--trials", "1", "--taus", "2,6",
                 "--prompt-tokens", "32", "--new-tokens", "24", "--repeats", "3", "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert (table.tau_measured == table.tau).all() and (table.identical == "2/2").all()
    assert (table.timing == "cuda_graphs").all() and len(table) == 2 * len(VARIANTS)
