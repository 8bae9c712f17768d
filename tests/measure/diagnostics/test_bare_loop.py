"""The bare-loop benchmark: our ar and a bare model(...) loop make the same tokens; it prints both and the ratio."""

from harness.measure.diagnostics.bare_loop import main


def test_bare_loop_prints_rates_ratios_and_the_control(capsys):
    code = main(["--random-shape", "workflow/config/default.yaml", "workflow/config/smoke.yaml", "--trials", "3",
                 "--prompt-tokens", "12", "--new-tokens", "6"])
    out = capsys.readouterr().out
    assert code == 0 and "outputs identical in 3/3 trials" in out
    for line in ("bare     :", "ar       :", "ar again :", "ar / bare", "A/A: ar again / ar",
                 "engine overhead per token over the bare loop"):
        assert line in out
