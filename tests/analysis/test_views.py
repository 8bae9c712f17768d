"""The views as one table: their order (the report's), the methods' own views, plan-time applicability, and a view
with no data (no figure, no section)."""

import subprocess
import sys

from harness.analysis.figures import write_figures
from harness.analysis.report import write_report
from harness.analysis.view import Planned, Scope
from harness.analysis.views import all_views, figure_names, scope_views, table_names, write_tables
from tests.analysis.test_report import write_runs

DEFAULT = Scope(tuple(Planned(name, method, datasets=("humaneval", "stdlib_code"))
                      for name, method in (("ar", "ar"), ("ar_control", "ar"), ("sd", "sd"), ("eagle", "eagle"),
                                           ("lyanna", "lyanna"), ("polybasic", "polybasic"))),
                {"humaneval": ("humaneval",), "stdlib_code": ("stdlib_code",)})


def test_the_views_are_one_list_in_the_reports_order():
    names = [view.name for view in all_views()]
    # the figures in the report's order, a method's own views placed after the view they name
    assert figure_names() == ["speedup", "phases", "tau", "waste", "budget", "depth", "ablation", "efficiency",
                              "categories", "context_length", "forwards", "samples"]
    assert names.index("polybasic_cost_rule") == names.index("head_to_head") + 1
    assert names[-1] == "hedgespec" and names[:2] == ["regime", "claims"]  # the paper's claims under the regime
    assert table_names() == ["claims", "depth_acceptance", "categories", "context_length", "polybasic_cost_rule", "samples",
                             "suffix", "hedgespec"]
    for view in all_views():
        assert not view.after or view.after in names, view.name
        assert bool(view.figure) == bool(view.caption) and bool(view.section) == bool(view.title), view.name


def test_the_views_are_read_without_torch_matplotlib_or_the_methods_code():
    code = ("import sys; from harness.analysis.views import all_views; all_views(); "
            "print(sorted(m for m in ('torch', 'transformers', 'matplotlib', 'methods.hedgespec.method', "
            "'methods.lyanna.method') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_view_applies_where_its_scope_plans_its_data():
    def figures(scope):
        return [view.name for view in scope_views(scope) if view.figure]

    assert figures(DEFAULT) == ["speedup", "phases", "tau", "waste", "depth", "efficiency", "forwards"]
    assert "polybasic_cost_rule" in [view.name for view in scope_views(DEFAULT)]
    more = Scope(DEFAULT.variants + (
        Planned("eagle_b12", "eagle", settings={"budget": 12}),  # eagle's default budget differs: a sweep
        Planned("lyanna_feature", "lyanna", main=False, datasets=("stdlib_code",)),
        Planned("eagle_long", "eagle", datasets=("stdlib_long",)),
        Planned("stand_samples", "stand", settings={"samples": 4}, datasets=("spec_bench",)),
    ), {**DEFAULT.categories, "stdlib_long": ("ctx128", "ctx256"), "spec_bench": None})
    assert figures(more) == figure_names()
    assert "hedgespec" not in [view.name for view in scope_views(more)]


def test_a_view_with_no_data_writes_no_figure_and_no_section(tmp_path):
    paths = write_runs(tmp_path)  # no variant with several samples, no hedgespec, one category
    write_tables(paths, tmp_path / "tables")
    assert (tmp_path / "tables" / "samples.csv").read_text().startswith("variant,")  # the header only
    drawn = {path.stem for path in write_figures(tmp_path / "tables", tmp_path / "figures", main=["ar", "sd", "eagle"])}
    assert "samples" not in drawn and "categories" not in drawn and "speedup" in drawn
    # a figure drawn by name anyway (the plan thought it had data) is still not embedded
    write_figures(tmp_path / "tables", tmp_path / "figures", main=["ar", "sd", "eagle"], names=["samples"])
    assert (tmp_path / "figures" / "samples.png").is_file()
    text = write_report(tmp_path / "tables", paths, tmp_path / "figures", tmp_path / "report.md",
                        main=["ar", "sd", "eagle"])
    for absent in ("![samples]", "**samples**", "### Several samples per prompt", "### Drafter selection",
                   "### Per category", "### By context length", "### Polybasic"):
        assert absent not in text, absent
    assert "![speedup](figures/speedup.png)" in text and "### Ablations and budget sweeps" in text
