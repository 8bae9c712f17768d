"""The architecture, checked from the imports: each package of ``harness`` imports only packages below it, the
torch-free parts stay torch-free, ``harness`` never imports ``methods`` (it reads the catalog by name), and no two
modules import each other, however far round (an import inside a function or under ``TYPE_CHECKING`` included).

Layers, lowest first (a package may import its own modules and any lower layer):
 -1  errors
  0  options, catalog (the method registry), store (atomic files, records, the workflow config's schema)
 0.5 hybrid (a hybrid target's tree forward and rollback cache: what backend runs for one)
  1  backend (models, forward, caches, graphs, device), data (prompts, corpus, token streams), analysis
  2  trees, retrieval (model-free drafting structures), workflow_datasets (the prompt sets a plan runs)
  3  verify, workflow_plan (reads prompt files, parses options)    4  engine, workflow_jobs (command lines)
  5  runner, training               6  measure (benchmarks over runs and trained drafters), gpu (a lent GPU box)
  7  cli
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {
    "errors": -1, "options": 0, "catalog": 0, "store": 0, "hybrid": 0.5,
    "backend": 1, "data": 1, "analysis": 1, "workflow_datasets": 2, "workflow_plan": 3, "workflow_jobs": 4,
    "trees": 2, "retrieval": 2, "verify": 3, "engine": 4, "runner": 5, "training": 5, "measure": 6, "gpu": 6, "cli": 7,
}
EXEMPT = {"__init__", "__main__"}  # the package's lazy re-exports and `python -m harness`
TORCH_FREE = ["harness.catalog", "harness.store.workflow_config", "harness.workflow_datasets", "harness.workflow_plan", "harness.workflow_jobs", "harness.errors", "harness.options", "harness.store.records",
              "harness.analysis.metrics", "harness.analysis.summary", "harness.analysis.figures", "harness.analysis.plotting",
              "harness.analysis.report", "harness.analysis.view", "harness.analysis.views", "harness.analysis.divergence", "harness.analysis.specbench", "harness.gpu.wheels",
              "harness.gpu.quick_readme", "harness.gpu.commands", "harness.trees.beam_shape", "harness.engine.arguments", "methods"]


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if parts[0] == "harness" and len(parts) > 1 else parts[0]


def _imports(path: Path, module_level_only: bool = False) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if module_level_only else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def _harness_files() -> list[Path]:
    return sorted((ROOT / "harness").rglob("*.py"))


def test_harness_is_packages_not_a_flat_bag():
    top = sorted(path.stem for path in (ROOT / "harness").glob("*.py"))
    assert set(top) <= set(LAYERS) | EXEMPT, f"top-level modules outside the layer table: {set(top) - set(LAYERS)}"
    packages = {path.parent.name for path in (ROOT / "harness").glob("*/__init__.py")}
    assert packages == {name for name in LAYERS if (ROOT / "harness" / name).is_dir()}
    assert len(top) <= 10


def test_every_import_goes_down_the_layers():
    breaches = []
    for path in _harness_files():
        relative = path.relative_to(ROOT / "harness")
        unit = relative.parts[0].removesuffix(".py")
        if unit in EXEMPT:
            continue
        for line, module in _imports(path):
            target = _unit(module)
            if module.split(".")[0] == "methods":
                breaches.append(f"{relative}:{line} imports {module} (harness reads methods through the catalog)")
            elif module.split(".")[0] == "harness" and target != unit and target not in EXEMPT:
                if target not in LAYERS or LAYERS[target] >= LAYERS[unit]:
                    breaches.append(f"{relative}:{line}: {unit} (layer {LAYERS[unit]}) imports {module}")
    assert not breaches, "\n".join(breaches)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of ``harness`` and the modules of ``harness`` it imports anywhere in its file: at the top, in a
    function (an import deferred to call time is a dependency all the same) or under ``TYPE_CHECKING``. ``from
    package import module`` names the module."""
    modules = {_module_name(path): path for path in _harness_files()}
    graph = {}
    for module, path in modules.items():
        named = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                named |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        graph[module] = {name for name in named if name in modules and name != module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's circles: each strongly connected component of more than one module (Tarjan's algorithm,
    iterative), its modules sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = stack[stack.index(node):]
                    del stack[stack.index(node):]
                    if len(component) > 1:
                        cycles.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return cycles


def test_no_import_cycles():
    graph = import_graph()
    assert "harness.engine.adapter" in graph and graph["harness.analysis.figures"]  # the graph was built
    assert not (cycles := import_cycles(graph)), "import circles in harness/: " + "; ".join(
        " <-> ".join(cycle) for cycle in cycles)


def test_the_cycle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_torch_free_modules_import_no_torch():
    for module in TORCH_FREE:
        path = ROOT / (module.replace(".", "/") + ".py")
        path = path if path.is_file() else path.with_suffix("") / "__init__.py"
        heavy = [name for _, name in _imports(path, module_level_only=True)
                 if name.split(".")[0] in ("torch", "transformers")]
        assert not heavy, f"{module} imports {heavy} at module level"
    code = (f"import sys; import {', '.join(TORCH_FREE)}; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"importing the torch-free modules loaded {result.stdout.strip()}"


def test_no_module_is_over_400_lines():
    long = {str(path.relative_to(ROOT)): n for path in [*_harness_files(), *(ROOT / "methods").rglob("*.py")]
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long, long
