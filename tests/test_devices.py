"""Device placement, checked from the source (CI has no GPU): every tensor and generator that ``harness`` and
``methods`` create says where it lives, so no path only the CPU has run puts a CPU tensor or generator beside a
model on CUDA (``generate(..., generator=torch.Generator())``, a CPU tensor in a training step).

A ``torch.<factory>(...)`` call (FACTORIES) passes when
- it names its device: ``device=`` (a literal ``"cpu"`` only with a host mark), or ``out=`` (the tensor it writes);
- it is marked host-side: a ``# host: <why>`` comment on a line of its statement, or on the line just above it
  (indices and masks built on the host and then moved, CPU data, token streams, draws that must be the same on
  every machine);
- its value goes to a device at once: the first argument of ``to_device(...)``;
- it is a module's state: the argument of ``nn.Parameter(...)`` or ``register_buffer(...)`` (moved by ``.to``);
- its module only prepares data on the host (HOST_MODULES, one reason each).
``torch.Generator`` must name its device in every case: ``torch.Generator(device="cpu")`` with a host mark for
CPU-side data (the same draws as ``torch.Generator()``), the model's device for anything it samples.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "full", "empty", "arange", "linspace", "logspace", "eye",
             "rand", "randn", "randint", "randperm", "empty_strided", "tril_indices", "triu_indices", "scalar_tensor",
             "Generator"}
HOST_MODULES = {  # path prefix (relative to the repository) -> why nothing there meets a model's device
    "harness/data/": "prompt sets, corpora and token streams are prepared and stored on the host; consumers move "
                     "what they feed a model",
}
MARK = re.compile(r"#\s*host:(.*)")
HOW = "has no device: pass device=... (the device of the tensor it meets, or the model's) or mark it host-side with " \
      "`# host: <why>`"


@dataclass(frozen=True)
class Site:
    line: int
    problem: str
    generator: bool = False  # a generator names its device even in a HOST_MODULES module


def _comments(source: str) -> dict[int, tuple[str, bool]]:
    """Line -> (comment text, whether the comment is the whole line)."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = (token.string, not token.line[:token.start[1]].strip())
    return found


def _factory(node: ast.AST) -> str | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
        return node.func.attr
    return None


def _called(node: ast.AST) -> str:
    func = node.func if isinstance(node, ast.Call) else None
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _is_cpu(node: ast.AST) -> bool:
    """A literal "cpu" device: ``"cpu"`` or ``torch.device("cpu")``."""
    if isinstance(node, ast.Constant):
        return node.value == "cpu"
    return _called(node) == "device" and len(node.args) == 1 and _is_cpu(node.args[0])


def _placed_by_use(node: ast.Call, parents: dict[ast.AST, ast.AST]) -> bool:
    """The value goes to a device at once (``to_device``'s first argument) or is a module's state."""
    parent = parents.get(node)
    if _called(parent) == "Parameter" and parent.args[:1] == [node]:
        return True
    if _called(parent) == "register_buffer" and parent.args[1:2] == [node]:
        return True
    child = node
    while parent is not None and not isinstance(parent, ast.stmt):
        if _called(parent) == "to_device" and parent.args and child is parent.args[0]:
            return True
        child, parent = parent, parents.get(parent)
    return False


def _mark_lines(node: ast.Call, parents: dict[ast.AST, ast.AST], comments: dict[int, tuple[str, bool]]) -> list[int]:
    """The lines whose ``# host:`` comment covers ``node``: its statement's (a compound statement's header up to
    the call), and the comment line just above."""
    statement = node
    while not isinstance(statement, ast.stmt):
        statement = parents[statement]
    simple = not any(isinstance(getattr(statement, field, None), list) and getattr(statement, field)
                     and isinstance(getattr(statement, field)[0], ast.stmt) for field in ("body", "orelse"))
    last = statement.end_lineno if simple else node.end_lineno
    lines = list(range(statement.lineno, last + 1))
    above = comments.get(statement.lineno - 1)
    return [statement.lineno - 1, *lines] if above and above[1] else lines


def check_source(source: str) -> tuple[list[Site], set[int]]:
    """The creation sites of ``source`` that may land on the wrong device, and the lines of its ``# host:`` marks
    that cover no site needing one (stale or misplaced)."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    comments = _comments(source)
    marks = {line: match.group(1).strip() for line, (text, _) in comments.items() if (match := MARK.search(text))}
    used, sites = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "torch":
            sites += [Site(node.lineno, f"imports torch.{alias.name} by name: call it as torch.{alias.name} so this "
                                        f"check sees it") for alias in node.names if alias.name in FACTORIES]
        name = _factory(node)
        if name is None:
            continue
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        device = keywords.get("device", node.args[0] if name == "Generator" and node.args else None)
        if name == "Generator" and device is None:
            sites.append(Site(node.lineno, 'torch.Generator() names no device: pass device= (the model\'s device for '
                                           'what it samples, or "cpu" with `# host: <why>` for CPU-side data)', True))
            continue
        if device is not None and not _is_cpu(device) or "out" in keywords or _placed_by_use(node, parents):
            continue
        covering = [line for line in _mark_lines(node, parents, comments) if line in marks]
        used.update(covering)
        if not covering:
            what = 'creates on "cpu" without saying why: add `# host: <why>`' if device is not None else HOW
            sites.append(Site(node.lineno, f"torch.{name}(...) {what}"))
        elif not all(len(marks[line]) >= 10 and len(marks[line].split()) >= 2 for line in covering):
            sites.append(Site(node.lineno, f"torch.{name}(...): its `# host:` mark needs a reason (a few words: why "
                                           f"it is made on the host)"))
    return sorted(sites, key=lambda site: site.line), set(marks) - used


def _source_files() -> list[Path]:
    return sorted([*(ROOT / "harness").rglob("*.py"), *(ROOT / "methods").rglob("*.py")])


def _host_module(relative: str) -> bool:
    return any(relative.startswith(prefix) for prefix in HOST_MODULES)


def test_every_tensor_and_generator_names_its_device():
    breaches = []
    for path in _source_files():
        relative = path.relative_to(ROOT).as_posix()
        sites, _ = check_source(path.read_text(encoding="utf-8"))
        breaches += [f"{relative}:{site.line}: {site.problem}" for site in sites
                     if site.generator or not _host_module(relative)]
    assert not breaches, f"{len(breaches)} creation sites may land on the wrong device:\n" + "\n".join(breaches)


def test_every_host_mark_covers_a_site_that_needs_it():
    stale = [f"{path.relative_to(ROOT).as_posix()}:{line}: a `# host:` mark that covers no tensor created without "
             f"a device (remove it, or move it onto the creating call's line)"
             for path in _source_files() for line in sorted(check_source(path.read_text(encoding="utf-8"))[1])]
    assert not stale, "\n".join(stale)


def test_the_host_modules_exist():
    assert all((ROOT / prefix).exists() and reason for prefix, reason in HOST_MODULES.items())


def _lines(source: str) -> list[int]:
    return [site.line for site in check_source(source)[0]]


def test_the_check_finds_what_lands_on_the_wrong_device():
    assert _lines("import torch\ng = torch.Generator()\nh = torch.Generator().manual_seed(1)\n") == [2, 3]
    assert _lines("g = torch.Generator()  # host: a reason is not a device\n") == [1]
    assert _lines("x = torch.zeros(3)\ny = torch.arange(n, dtype=torch.long)\nz = torch.tensor([1]).to(d)\n") == [1, 2, 3]
    assert _lines("x = torch.zeros(3, device='cpu')\ny = torch.ones(2, device=torch.device('cpu'))\n") == [1, 2]
    assert _lines("x = torch.zeros(3)  # host:\ny = torch.zeros(3)  # host: cpu\n") == [1, 2]
    assert _lines("for i in torch.arange(n):\n    pass  # host: a mark in the body is not the header's\n") == [1]
    assert _lines("from torch import zeros\n") == [1]
    assert _lines("x = to_device(torch.ones(3) + 1, d).sum() + torch.ones(3)\n") == [1]


def test_the_check_passes_what_says_where_it_lives():
    source = """
g = torch.Generator(device=model.device)
c = torch.Generator("cpu").manual_seed(0)  # host: draws the data windows, the same on every machine
c = torch.Generator(device="cpu")  # host: draws the data windows, the same on every machine
x = torch.zeros(3, device=other.device)
y = torch.arange(4, out=buffer)
z = to_device(torch.tensor(rows) + offset, device)
w = torch.tensor(
    rows, dtype=torch.long)  # host: an index built on the host; the caller moves it
# host: an index built on the host; the caller moves it
v = torch.tensor(rows)
self.weight = nn.Parameter(torch.ones(hidden))
self.register_buffer("ids", torch.zeros(4, dtype=torch.long))
"""
    assert check_source(source) == ([], set())
    assert check_source("x = torch.zeros(3, device=d)  # host: a device named needs no mark\n")[1] == {1}
