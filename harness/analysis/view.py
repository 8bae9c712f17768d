"""What a view of the report is (``View``), what it is decided on at plan time (``Scope``: the variants and prompt
sets a report covers) and what it reads when drawn or written (``Inputs``: the tables). The views themselves are
listed in ``harness.analysis.views``; a method's own in its package's ``view.py`` (``methods/<name>/view.py``),
read here on its own (``method_view_module``: a method's package may load torch, a view must not, the workflow's
plan reads them).

A view is a name (its figure's file name and, unless ``table_name`` says otherwise, its table's), what it is built
from (``table``: a function of the records frame, written by ``summarize`` to ``tables/<name>.csv``; without one it
reads the summary), an optional figure (``"module:function"`` of ``Inputs``, imported only when drawn, so the plan
never imports matplotlib) with its caption, its report section (title, intro, and a body function of ``Inputs``:
no section when the body is empty) and where it applies (``applies``: decided at plan time from the report's
variants and prompt sets, so a figure with no data is neither a rule output, drawn nor embedded).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from harness.catalog import entry
from harness.errors import DraftcountError

SUMMARY = "summary"  # tables/summary.csv


@dataclass(frozen=True)
class Planned:
    """One variant of a report, as the workflow plans it: its method, whether it is one of the report's main rows
    (run on every dataset; the others are ablations), its prompt sets and its ``bench.methods`` entry."""

    name: str
    method: str
    main: bool = True
    datasets: tuple[str, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Scope:
    """What one report covers: its variants, and the categories of the prompt sets they run (None: not known until
    the set is built)."""

    variants: tuple[Planned, ...]
    categories: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)

    def runs(self, method: str, main: bool | None = None) -> bool:
        """Whether a variant of ``method`` (a main one, an ablation, or either) is in the scope."""
        return any(item.method == method and main in (None, item.main) for item in self.variants)

    def prompt_categories(self) -> list[tuple[str, ...] | None]:
        used = dict.fromkeys(dataset for item in self.variants for dataset in item.datasets)
        return [self.categories.get(dataset) for dataset in used]


@dataclass
class Inputs:
    """What a view's figure and section read: the summary, the other tables (``tables_dir/<name>.csv``, read on
    first use; empty when not written), the report's main variants, the training metrics, the head-to-head
    comparisons (``report.compare``) and the systems' own published figures (``report.published``)."""

    summary: pd.DataFrame
    tables_dir: Path | None = None
    main: list[str] = field(default_factory=list)
    metrics: list[Path] = field(default_factory=list)
    compare: dict[str, str] = field(default_factory=dict)
    published: dict[str, dict[str, Any]] = field(default_factory=dict)  # report.published: a system's own figures
    read: dict[str, pd.DataFrame] = field(default_factory=dict)  # the tables read so far, by name

    def table(self, name: str) -> pd.DataFrame:
        """``tables_dir/<name>.csv``, read once; empty when it was not written."""
        if name not in self.read:
            path = Path(self.tables_dir) / f"{name}.csv" if self.tables_dir else None
            try:
                self.read[name] = pd.read_csv(path) if path and path.is_file() else pd.DataFrame()
            except pd.errors.EmptyDataError:  # a table without even a header
                self.read[name] = pd.DataFrame()
        return self.read[name]


def read_inputs(tables_dir: Path, main: list[str] | None = None, metrics: list[Path] | None = None,
                compare: dict[str, str] | None = None, published: dict[str, dict[str, Any]] | None = None) -> Inputs:
    """The tables ``summarize --tables-dir`` wrote; ``main`` (default: every variant) must all have rows."""
    path = Path(tables_dir) / f"{SUMMARY}.csv"
    if not path.is_file():
        raise DraftcountError(f"no table {path} (write it with `python -m harness summarize --tables-dir`)")
    summary = pd.read_csv(path, keep_default_na=False, na_values=[""])
    if summary.empty:
        raise DraftcountError(f"{path} holds no rows")
    missing = sorted(set(main or []) - set(summary.variant))
    if missing:
        raise DraftcountError(f"variant {missing[0]!r} has no rows in {path}")
    return Inputs(summary, Path(tables_dir), list(main or sorted(summary.variant.unique())), list(metrics or []),
                  dict(compare or {}), dict(published or {}))


def everywhere(scope: Scope) -> bool:
    return True


@dataclass(frozen=True)
class View:
    """One table, figure or report section (see the module's docstring)."""

    name: str
    applies: Callable[[Scope], bool] = everywhere
    table: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    table_name: str = ""
    figure: str = ""
    caption: str = ""
    has_data: Callable[[Inputs], bool] | None = None  # default: its table has rows (without a table: always)
    title: str = ""
    intro: str = ""
    section: Callable[[Inputs], str] | None = None
    head: bool = False  # a `##` section before the environment (the regime card), else a results subsection
    after: str = ""  # a method's view: the view it follows (default: the last)

    @property
    def table_file(self) -> str:
        return self.table_name or self.name

    def with_data(self, data: Inputs) -> bool:
        if self.has_data is not None:
            return self.has_data(data)
        return self.table is None or not data.table(self.table_file).empty

    def draw(self, data: Inputs) -> Any:
        module, _, function = self.figure.partition(":")
        return getattr(importlib.import_module(module), function)(data)

    def markdown(self, data: Inputs) -> list[str]:
        """The section's lines: heading, intro, body; none when the body is empty."""
        body = self.section(data) if self.section else ""
        return [f"{'##' if self.head else '###'} {self.title}", "", self.intro, "", body, ""] if body else []


def method_view_module(method: str) -> ModuleType | None:
    """The ``view.py`` of the method's package (``methods/<method>/view.py``, or a plug-in's beside its
    ``method.py``; None without one). A method package's ``__init__`` holds only its options (torch-free, as the
    catalog asks), and its views import no torch either: the workflow's plan reads them."""
    package = entry(method).package
    spec = importlib.util.find_spec(package)  # the method's package: found (its parents imported), not imported
    folders = list(spec.submodule_search_locations or []) if spec else []
    if not folders or not (Path(folders[0]) / "view.py").is_file():
        return None
    return importlib.import_module(f"{package}.view")
