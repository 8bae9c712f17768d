"""The CUDA suite's imports resolve on a machine without CUDA: every ``from X import Y`` and ``import X`` in
tests/backend/test_cuda.py, at module level or inside a test, names a module and attribute that exist. CI skips
the CUDA tests themselves, so without this a re-layout that moves a name breaks the GPU suite unseen."""

import ast
import importlib
from pathlib import Path

CUDA_SUITE = Path(__file__).with_name("test_cuda.py")


def imported_names(source: str) -> list[tuple[str, str | None]]:
    """(module, name) for every import in ``source``, wherever it stands; name None for ``import module``."""
    names: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            names += [(alias.name, None) for alias in node.names]
    return names


def unresolved(names: list[tuple[str, str | None]]) -> list[str]:
    missing = []
    for module, name in names:
        try:
            loaded = importlib.import_module(module)
        except ImportError as error:
            missing.append(f"{module}: {error}")
            continue
        if name is not None and not hasattr(loaded, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    return missing


def test_every_import_of_the_cuda_suite_resolves_on_cpu():
    names = imported_names(CUDA_SUITE.read_text())
    assert len(names) > 20, "the CUDA suite's imports were not found"
    assert unresolved(names) == []


def test_a_moved_name_is_caught():
    """The check would have caught the projection names the re-layout moved (inside a test function)."""
    source = ("def test_projection():\n"
              "    from harness.measure.projections.projection import eagle_step_latency, lyanna_depth_latency, "
              "project_speedups\n")
    assert unresolved(imported_names(source)) == ["harness.measure.projections.projection.eagle_step_latency",
                                                  "harness.measure.projections.projection.lyanna_depth_latency"]


def test_the_cuda_suite_imports_as_a_module():
    """Collected without CUDA, its module-level imports run (its tests are skipped, not its imports)."""
    module = importlib.import_module("tests.backend.test_cuda")
    assert "cuda" in [decorator.mark.name for decorator in module.pytestmark]
