"""Target zoo_seed (config `target_seeds`, workflow/rules/zoo_seed.smk): the zoo again from other seeds, planned as
part of `studies` and never of `all` (its 45 minutes on 2 cores)."""

from tests.workflow.test_workflow import job_counts, overrides, snakemake


def test_studies_plan_the_second_zoo_and_all_does_not(tmp_path):
    result = snakemake("-n", "-p", "studies", *overrides(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    # its own target, draft LM (sd and tree_sd draft with it) and feature dump, eagle's and lyanna's drafters, and
    # {ar_control, eagle, lyanna, sd, tree_sd} x 2 datasets x 2 temperatures benchmarked, each shape calibrated again
    assert {rule: counts.get(f"zoo_seed_{rule}") for rule in ("train_target", "train_draft", "dump_features",
                                                              "train_drafter", "bench", "tree_shape", "chain_length",
                                                              "sequoia_tree", "summary")} == {
        "train_target": 1, "train_draft": 1, "dump_features": 1, "train_drafter": 2, "bench": 20, "tree_shape": 4,
        "chain_length": 2, "sequoia_tree": 2, "summary": 1}
    # the claims' four copied as <variant>_target1 and published; the studies report reads them
    assert counts["target_seed_records"] == 16
    work, results = tmp_path / "work-zoo-seed1", tmp_path / "results"
    assert f"--out {results / 'zoo-seed1' / 'raw' / 'lyanna' / 'stdlib_code-t1.jsonl'}" in result.stdout
    assert f"--target {work / 'models' / 'target'}" in result.stdout and "--opt seed=1 " in result.stdout
    summary = result.stdout.split("rule studies_summary:")[1].split("\n\n")[0]
    assert str(results / "raw" / "lyanna_target1" / "humaneval-t0.jsonl") in summary
    main = snakemake("-n", "-p", "all", *overrides(tmp_path))
    assert main.returncode == 0, main.stderr[-3000:]
    assert not [rule for rule in job_counts(main.stdout) if rule.startswith(("zoo_seed", "target_seed"))]
    assert "_target1" not in main.stdout and "zoo-seed1" not in main.stdout
