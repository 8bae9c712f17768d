"""The vlm study's plan (dry run): the VLM target and its text-only draft LM, the two feature dumps (with and
without the image positions), its three drafters and every variant at both temperatures, paired with ar."""

from tests.workflow.test_workflow import job_counts, snakemake


def test_the_vlm_study_plans_its_zoo_drafters_and_paired_runs(tmp_path):
    result = snakemake("-n", "study_vlm", "--configfile", "workflow/config/default.yaml", "workflow/config/vlm.yaml",
                       "--config", f"work_dir={tmp_path / 'work'}", f"results_dir={tmp_path / 'results'}")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert {rule: counts.get(rule) for rule in ("vlm_model", "vlm_features", "vlm_drafter", "vlm_bench",
                                                "vlm_report", "vlm_prompts")} == {
        "vlm_model": 2, "vlm_features": 2, "vlm_drafter": 3, "vlm_bench": 5 * 2, "vlm_report": 1, "vlm_prompts": 1}
    assert "train_target" not in counts and "bench" not in counts  # the text zoo's target and runs are not needed
