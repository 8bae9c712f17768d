"""``python -m harness gpu-wheels | gpu-install | quick-readme``: the subcommands of a GPU box without network."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.errors import DraftcountError


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    wheels = subparsers.add_parser(
        "gpu-wheels", help="fill a folder with the wheels a GPU box without network needs (Snakemake, Python 3.12)")
    wheels.add_argument("--out", type=Path, default=Path(".whl"), help="the wheel folder (default .whl)")
    wheels.add_argument("--no-check", action="store_true",
                        help="skip resolving Snakemake from the folder alone for Python 3.12")
    install = subparsers.add_parser(
        "gpu-install", help="install a wheel folder's wheels this interpreter lacks (--no-index --no-deps --target)")
    install.add_argument("--wheels", type=Path, default=Path(".whl"), help="the wheel folder (default .whl)")
    install.add_argument("--target", type=Path, required=True, help="where to install (then on PYTHONPATH)")
    readme = subparsers.add_parser("quick-readme", help="the quick GPU check's README from what its folder holds")
    readme.add_argument("--results", type=Path, required=True, help="the check's results folder")
    readme.add_argument("--work", type=Path, required=True, help="the check's work folder (model metrics)")
    readme.add_argument("--started", type=float, required=True, help="when the check started (seconds since epoch)")
    readme.add_argument("--state", required=True, help="running, finished, timed out after N min, failed (...)")
    readme.add_argument("--ran", default="bash workflow/scripts/gpu_quick.sh", help="the command that ran")


def _cmd_gpu_wheels(args: argparse.Namespace) -> int:
    from harness.gpu.wheels import FOLDER_LIMIT_MIB, build_wheel_folder, check_resolves, folder_mib

    started = time.perf_counter()
    wheels = build_wheel_folder(args.out)
    size = folder_mib(args.out)
    print(f"{args.out}: {len(wheels)} wheels, {size:.1f} MiB ({time.perf_counter() - started:.0f} s)")
    if not args.no_check:
        with tempfile.TemporaryDirectory() as target:
            check_resolves(args.out, Path(target))
        print("snakemake resolves from it alone for Python 3.12 (pip --no-index --only-binary=:all:)")
    if size > FOLDER_LIMIT_MIB:
        raise DraftcountError(f"{args.out} holds {size:.1f} MiB, over {FOLDER_LIMIT_MIB} MiB: empty it and run again")
    print(f"on the box: python3 -m harness gpu-install --wheels {args.out} --target /tmp/site "
          "&& export PYTHONPATH=/tmp/site")
    return 0


def _cmd_gpu_install(args: argparse.Namespace) -> int:
    from harness.gpu.wheels import installable_wheels, installed_projects

    if not args.wheels.is_dir():
        raise DraftcountError(f"no wheel folder {args.wheels}: make it with `python -m harness gpu-wheels`")
    wheels = installable_wheels(args.wheels, installed_projects())
    if not wheels:
        print(f"{args.wheels}: every project is already installed")
        return 0
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                             "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(args.target),
                             *map(str, wheels)], capture_output=True, text=True)
    if result.returncode != 0:
        raise DraftcountError(f"pip install from {args.wheels} failed: {result.stderr.strip().splitlines()[-1:]}")
    print(f"installed {len(wheels)} wheels from {args.wheels} into {args.target}")
    return 0


def _cmd_quick_readme(args: argparse.Namespace) -> int:
    from harness.gpu.quick_readme import quick_readme
    from harness.store.atomic import atomic_path

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    text = quick_readme(args.results, args.work, args.started, args.state, args.ran,
                        commit.stdout.strip() if commit.returncode == 0 else "unknown (no git)")
    args.results.mkdir(parents=True, exist_ok=True)
    with atomic_path(args.results / "README.md") as partial:
        partial.write_text(text, encoding="utf-8")
    print(f"wrote {args.results / 'README.md'} ({args.state})")
    return 0


HANDLERS = {"gpu-wheels": _cmd_gpu_wheels, "gpu-install": _cmd_gpu_install, "quick-readme": _cmd_quick_readme}
