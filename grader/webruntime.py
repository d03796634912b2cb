"""The files the page's Python worker starts from, built once per version of their inputs.

From the pinned runtime (``grader/assets.py``):

* the Pyodide core files the worker loads;
* ``site-packages.bin``: the files of the wheels (numpy, pytest and what it needs) that the
  page can need (`in_image`), in one image that the worker writes to Pyodide's file system
  at once (``web/src/image.js``);
* ``snapshot.bin``: a memory snapshot of Python with numpy, pytest and the kit's runner
  imported (``web/snapshot.mjs``): restoring it skips most of Python's start-up; and
  ``snapshot.bin.json``, where numpy's compiled modules were linked (``web/src/dynlibs.js``);
* beside each, its brotli and gzip versions (``web/compress.mjs``) and its zstd version
  (`zstd_compress`), so the server sends compressed bytes without compressing them on every
  request.

The folder is cached in ``.cache/`` under a digest of all its inputs, and the site serves it
as ``/pyodide-<digest>/``: its name changes whenever one of its bytes does, so a browser may
keep it for good.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import zstandard

from grader import assets
from grader.problems import KIT_ROOT

WEB_DIR = KIT_ROOT / "web"
CORE_FILES = ("pyodide.mjs", "pyodide.asm.js", "pyodide.asm.wasm", "python_stdlib.zip",
              assets.LOCK_NAME)  # fmt: skip
IMAGE_NAME = "site-packages.bin"
SNAPSHOT_NAME = "snapshot.bin"
SITE_PACKAGES = "/lib/python3.12/site-packages"
ZSTD_LEVEL = 10  # level 19 saves 13% more bytes but takes 20 times as long to compress
SCRIPTS = ("snapshot.mjs", "compress.mjs", "src/image.js", "src/dynlibs.js")


# pygments' lexers, formatters and styles: pytest highlights Python and diffs only, and the
# page's runner turns the terminal off. The rest is a third of the image, never imported.
PYGMENTS_PARTS = re.compile(r"pygments/(lexers|formatters|styles)/(__pycache__/)?(\w+)\.")
PYGMENTS_KEPT = {"__init__", "_mapping", "python", "diff", "terminal"}


def in_image(name: str) -> bool:
    """Whether the wheel member `name` is one the page's Python can need: not a type stub, not
    a package's own tests, not a pygments part that pytest never imports."""
    if name.endswith("/") or name.endswith(".pyi") or "/tests/" in name:
        return False
    part = PYGMENTS_PARTS.match(name)
    return part is None or part[3].split(".")[0] in PYGMENTS_KEPT


def site_packages_image(runtime: Path) -> bytes:
    """The image of the pinned wheels' files the page can need (format: web/src/image.js)."""
    files, data = [], []
    for wheel in assets.WHEELS:
        with zipfile.ZipFile(runtime / wheel.file_name) as archive:
            for member in sorted(archive.infolist(), key=lambda m: m.filename):
                if in_image(member.filename):
                    content = archive.read(member)
                    files.append([member.filename, len(content)])
                    data.append(content)
    header = json.dumps({"root": SITE_PACKAGES, "files": files}).encode()
    return b"".join([struct.pack("<I", len(header)), header, *data])


def zstd_compress(path: Path) -> None:
    """Write `path`.zst: browsers that accept zstd decode it about three times as fast as
    brotli (on a cold load, and on any load the worker's own cache cannot serve)."""
    # An 8 MiB window at most: what browsers accept for HTTP (RFC 9659).
    params = zstandard.ZstdCompressionParameters.from_level(ZSTD_LEVEL, window_log=23)
    compressed = zstandard.ZstdCompressor(compression_params=params).compress(path.read_bytes())
    path.with_name(path.name + ".zst").write_bytes(compressed)


def _digest(runtime: Path, kit_files: dict[str, str]) -> str:
    digest = hashlib.sha256((runtime / ".inputs").read_bytes())
    digest.update(Path(__file__).read_bytes())  # what goes into the image, and how it is packed
    for name in SCRIPTS:
        digest.update(name.encode() + b"\0" + (WEB_DIR / name).read_bytes())
    digest.update(json.dumps(kit_files, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _node(script: str, *args: str) -> None:
    try:
        subprocess.run(["node", str(WEB_DIR / script), *args], check=True, cwd=WEB_DIR)
    except FileNotFoundError:
        raise assets.AssetError("node is not installed (the site needs Node.js 20.19+)") from None
    except subprocess.CalledProcessError as exc:
        raise assets.AssetError(f"web/{script} failed (exit {exc.returncode}): see above") from None


def boot_folder(kit_files: dict[str, str]) -> Path:
    """The folder of boot files for the kit's runtime `kit_files` (built if not cached);
    its name ends with the digest of its inputs."""
    runtime = assets.ensure_assets()
    folder = runtime.parent / f"pyodide-{_digest(runtime, kit_files)}"
    if (folder / SNAPSHOT_NAME).is_file():
        return folder
    for stale in runtime.parent.glob("pyodide-*"):  # earlier versions' folders
        if stale.is_dir():
            shutil.rmtree(stale)
    print("taking the memory snapshot the page's Python starts from", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix=folder.name + "-", dir=runtime.parent))
    try:
        for name in CORE_FILES:
            shutil.copyfile(runtime / name, work / name)
        (work / IMAGE_NAME).write_bytes(site_packages_image(runtime))
        kit = work / "kit-files.json"
        kit.write_text(json.dumps(kit_files), encoding="utf-8")
        _node(
            "snapshot.mjs",
            str(runtime),
            str(work / IMAGE_NAME),
            str(kit),
            str(work / SNAPSHOT_NAME),
        )
        kit.unlink()
        _node("compress.mjs", *(str(path) for path in sorted(work.iterdir())))
        for path in sorted(work.glob("*.br")):
            zstd_compress(path.with_suffix(""))
        work.rename(folder)  # complete or absent: an interrupted build leaves no half folder
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder
