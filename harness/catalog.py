"""The method registry: reads the one method catalog (``methods/__init__.py``, one ``Entry`` line per method) and
the methods of installed plug-ins (packages beside draftcount registering an ``Entry`` each under the entry-point
group ``draftcount.methods``; docs/extending.md, *A method from another package*).

Torch-free, so that the workflow's planning, the figures' colours and ``--help`` need no model code: an entry
says what a method is called, which module implements it, what inputs it needs, its colour and where its options
dataclass lives (a torch-free module, so that the plan parses every variant's options at ``snakemake -n``); the
module itself (its adapter, trainer, cost model: ``harness.engine.method_spec``) is imported only when a run
needs it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Literal

from harness.errors import DraftcountError, first_line

CATALOG_PACKAGE = "methods"  # where the catalog lives: its CATALOG is a tuple of Entry
PLUGIN_GROUP = "draftcount.methods"  # the entry-point group a package registers its methods under (one Entry each)
NEEDS = (None, "draft", "drafter", ("draft", "drafter"))

Needs = Literal["draft", "drafter"] | tuple[str, ...] | None


def needed_inputs(needs: Needs) -> tuple[str, ...]:
    """What ``needs`` asks for, as a tuple: () for None, ("draft",), ("drafter",) or ("draft", "drafter")."""
    if needs is None:
        return ()
    return (needs,) if isinstance(needs, str) else tuple(needs)


@dataclass(frozen=True)
class Entry:
    """One method of the catalog.

    name: what configs, the CLI and records call it. module: the module (or package) that defines ``METHOD``.
    summary: one line for ``python -m harness methods`` and the docs. needs: None, ``"draft"`` (a draft LM with
    the target's tokenizer, ``--draft``), ``"drafter"`` (a trained drafter directory, ``--drafter``; the
    module's ``METHOD.train`` writes one) or ``("draft", "drafter")`` (both: a chain of a draft LM and a trained
    model, as `polybasic`). color: its colour in every figure (None: one from a spare palette). options:
    ``"module:Class"``, its options dataclass in a module that imports no torch (None: ``METHOD.options``, which
    imports the method's module); ``METHOD.options`` must be the same class. drafts: whether its adapter proposes
    draft tokens (only `ar` does not): a drafting method is refused on a target whose KV cache cannot drop rejected
    drafts (a hybrid model's recurrent state), before it is built. batched: its adapter decodes static batches of
    B > 1 prompts (``harness.engine.batched``; the load study runs it, the conformance suite checks each row).
    draft_vocab: its drafter trainer takes the training option ``draft_vocab: N`` (``harness.training.draft_vocab``:
    logits over the N most frequent training tokens, the map written with the drafter) and its adapter drafts only
    those tokens; the conformance suite then runs it as ``<name>+vocab`` too (the in-tree families are listed there,
    with the options of their cases; a plug-in declares it here). plugin: the installed package (distribution) a
    plug-in method came from; "" for the in-tree catalog's (set by ``catalog()``, not by the entry).
    """

    name: str
    module: str
    summary: str
    needs: Needs = None
    color: str | None = None
    options: str | None = None
    drafts: bool = True
    batched: bool = False
    draft_vocab: bool = False
    plugin: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise DraftcountError(f"catalog entry {self.name!r}: a method name must be an identifier")
        if self.needs not in NEEDS:
            raise DraftcountError(f"catalog entry {self.name!r}: needs must be one of {NEEDS}, not {self.needs!r}")
        if self.draft_vocab and not self.needs_drafter:
            raise DraftcountError(f"catalog entry {self.name!r}: draft_vocab says how its drafter trains; it needs a "
                                  f"trained drafter (needs='drafter')")
        if self.options is not None and len(self.options.split(":")) != 2:
            raise DraftcountError(f"catalog entry {self.name!r}: options must be 'module:Class', not {self.options!r}")

    @property
    def package(self) -> str:
        """The package holding the method (its options and, optionally, its ``view.py``): ``module``'s parent when
        ``module`` is a package's ``method`` module (``methods.eagle.method``), else ``module`` itself."""
        parent, _, last = self.module.rpartition(".")
        return parent if last == "method" and parent else self.module

    @property
    def needs_draft(self) -> bool:
        """The method runs a draft LM (``--draft``)."""
        return "draft" in needed_inputs(self.needs)

    @property
    def needs_drafter(self) -> bool:
        """The method runs a trained drafter directory (``--drafter``)."""
        return "drafter" in needed_inputs(self.needs)


@lru_cache(maxsize=1)
def catalog() -> dict[str, Entry]:
    """Every method by name: the in-tree catalog's in its order, then the installed plug-ins' (by package and entry
    point name); a one-line error for a malformed catalog, a broken plug-in or a name given twice."""
    entries = getattr(importlib.import_module(CATALOG_PACKAGE), "CATALOG", None)
    if not isinstance(entries, tuple) or not all(isinstance(entry, Entry) for entry in entries):
        raise DraftcountError(f"{CATALOG_PACKAGE}.CATALOG must be a tuple of harness.catalog.Entry")
    by_name: dict[str, Entry] = {}
    for entry in (*entries, *plugin_entries()):
        if entry.name in by_name:
            raise DraftcountError(f"method {entry.name!r} {_origin(entry)} clashes with method {entry.name!r} "
                                  f"{_origin(by_name[entry.name])}: rename one of them")
        by_name[entry.name] = entry
    return by_name


def _origin(entry: Entry) -> str:
    return f"of package {entry.plugin!r}" if entry.plugin else f"of the catalog ({CATALOG_PACKAGE}/__init__.py)"


def plugin_entries() -> list[Entry]:
    """The entries installed packages register under ``PLUGIN_GROUP`` (``name = "module:ENTRY"``, the entry point
    named as its method), each marked with its package; one line naming the package for an entry point that does
    not load or does not load an ``Entry`` of its own name."""
    found = []
    points = sorted(importlib.metadata.entry_points(group=PLUGIN_GROUP),
                    key=lambda point: (point.dist.name if point.dist else "", point.name))
    for point in points:
        package = point.dist.name if point.dist else point.module
        where = f"method plug-in {point.name!r} of package {package!r} ({point.value})"
        try:
            loaded = point.load()
        except Exception as error:  # a plug-in's import may fail in any way: its package is what to name
            raise DraftcountError(f"{where} does not load: {type(error).__name__}: {first_line(error)}") from None
        if not isinstance(loaded, Entry):
            raise DraftcountError(f"{where} is a {type(loaded).__name__}, not a harness.catalog.Entry")
        if loaded.name != point.name:
            raise DraftcountError(f"{where} loads method {loaded.name!r}: name the entry point as its method")
        found.append(replace(loaded, plugin=package))
    return found


def method_names() -> list[str]:
    """The catalog's methods, in catalog order."""
    return list(catalog())


def entry(name: str) -> Entry:
    entries = catalog()
    if name not in entries:
        raise DraftcountError(f"unknown method {name!r}; known methods: {', '.join(entries)}")
    return entries[name]


def methods_needing(needs: Needs) -> list[str]:
    """The methods that need nothing (None) or at least what ``needs`` names: ``"draft"`` (a draft LM),
    ``"drafter"`` (a trained drafter) or both (``("draft", "drafter")``)."""
    wanted = set(needed_inputs(needs))
    return [name for name, item in catalog().items()
            if (wanted <= set(needed_inputs(item.needs)) if wanted else item.needs is None)]


def load_method(name: str) -> Any:
    """The ``METHOD`` a catalog entry's module defines (a ``harness.engine.method_spec.MethodSpec``)."""
    item = entry(name)
    module = _import(item, item.module, "module")
    if not hasattr(module, "METHOD"):
        raise DraftcountError(f"method {name!r}{_of(item)}: module {item.module!r} defines no METHOD")
    return module.METHOD


def options_type(name: str) -> type:
    """A method's options dataclass, from its torch-free module (or, without one, from its ``METHOD``)."""
    item = entry(name)
    if item.options is None:
        return load_method(name).options
    module, _, attribute = item.options.partition(":")
    found = getattr(_import(item, module, "options module"), attribute, None)
    if found is None:
        raise DraftcountError(f"method {name!r}{_of(item)}: module {module!r} defines no {attribute}")
    return found


def _of(item: Entry) -> str:
    return f" (package {item.plugin!r})" if item.plugin else ""


def _import(item: Entry, module: str, what: str) -> Any:
    """``module`` of method ``item``; one line naming the method (and a plug-in's package) when it does not import.
    An in-tree module's other errors are bugs and keep their traceback; a plug-in's are its package's to fix."""
    caught = Exception if item.plugin else ModuleNotFoundError
    try:
        return importlib.import_module(module)
    except caught as error:
        raise DraftcountError(f"method {item.name!r}{_of(item)}: its {what} {module!r} cannot be imported "
                              f"({type(error).__name__}: {first_line(error)})") from None
