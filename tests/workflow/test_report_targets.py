"""The report rules planned from the views (harness/analysis/views.py): every figure a report embeds is a target of
its own, and a view with no data in a report's scope is no target at all (dry runs of the smoke profile)."""

from pathlib import Path

from harness.analysis.views import figure_names
from tests.workflow.test_workflow import job_counts, overrides, snakemake

MAIN_FIGURES = ["speedup", "phases", "tau", "waste", "depth", "efficiency", "categories", "forwards"]


def job_inputs(output: str, rule: str) -> list[Path]:
    """The inputs of the first job of ``rule`` in a dry run's listing."""
    block = output.split(f"rule {rule}:\n", 1)[1]
    line = next(line for line in block.splitlines() if line.strip().startswith("input:"))
    return [Path(path) for path in line.split("input:", 1)[1].strip().split(", ")]


def test_every_figure_the_report_embeds_is_a_target_of_its_own(tmp_path):
    args = ["--profile", "workflow/profiles/smoke", *overrides(tmp_path)]
    plan = snakemake("-n", "all", "studies", *args)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    results = tmp_path / "results"
    embedded = {}  # figure folder -> the figures its report reads, in the report's order
    for rule, folder in (("report", results / "figures"), ("studies_report", results / "studies" / "figures")):
        embedded[folder] = [path.stem for path in job_inputs(plan.stdout, rule)
                            if path.parent == folder and path.suffix == ".png"]
    # the smoke main comparison runs eagle on the mixed-domain set (categories) but has no budget sweep, no
    # ablation, no several samples and no long-context set; its studies add eagle_b12 and lyanna's ablations
    assert embedded[results / "figures"] == MAIN_FIGURES
    # and the learning curves (the smoke studies run eagle at two rungs), drawn by rule learning_curves
    assert embedded[results / "studies" / "figures"] == [
        name for name in figure_names() if name in {*MAIN_FIGURES, "budget", "ablation"}] + ["learning_curves"]
    targets = [str(folder / f"{name}.pdf") for folder, names in embedded.items() for name in names]
    figures = snakemake("-n", *targets, *args)
    assert figures.returncode == 0, figures.stdout[-3000:] + figures.stderr[-3000:]
    counts = job_counts(figures.stdout)
    assert counts["figure"] == len(MAIN_FIGURES)
    assert counts["studies_figure"] == len(embedded[results / "studies" / "figures"]) - 1
    assert counts["learning_curves"] == 1
    assert "report" not in counts and "studies_report" not in counts
    for folder, names in embedded.items():
        for name in figure_names():  # a view with no data here: neither a target nor drawn
            if name not in names:
                missing = snakemake("-n", str(folder / f"{name}.pdf"), *args)
                assert missing.returncode != 0 and "MissingRuleException" in missing.stdout + missing.stderr, name
