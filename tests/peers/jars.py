"""Where ``./bootstrap.sh peers`` put each pinned set of JVM peers, and a clear failure when
it did not.

A set is a folder ``interop/<set>/`` with a ``pom.xml``; its jars are copied (``mvn
dependency:copy-dependencies``) into ``~/.cache/cdcctl/interop/<set>-<hash>/lib`` where
``<hash>`` is the first 12 hex digits of the pom's SHA-256, so a changed pin resolves anew
and an old cache is never used by mistake. The folder is complete once ``lib/.complete``
exists (written last by the set-up step). The set-up step is ``python -m tests.peers.jars``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INTEROP = REPO / "interop"


class PeerMissing(RuntimeError):
    """A peer the tier needs was not set up: the message says how to set it up."""


def cache_root() -> Path:
    """Where the resolved sets live: ``interop`` in cdcctl's cache folder
    (``$CDCCTL_CACHE_DIR``, else ``~/.cache/cdcctl``)."""
    from engine.spark.archive import cache_dir

    return cache_dir() / "interop"


def pom_hash(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()[:12]


def sets() -> list[str]:
    """Every set under ``interop/`` (a folder with a ``pom.xml``)."""
    return sorted(p.parent.name for p in INTEROP.glob("*/pom.xml"))


def lib_dir(name: str) -> Path:
    """The resolved jars of set ``name``; :class:`PeerMissing` if they are not there."""
    pom = INTEROP / name / "pom.xml"
    if not pom.is_file():
        raise PeerMissing(f"no pinned set interop/{name}/pom.xml in this checkout")
    lib = cache_root() / f"{name}-{pom_hash(pom)}" / "lib"
    if not (lib / ".complete").exists():
        raise PeerMissing(
            f"the JVM peers of interop/{name} are not resolved (expected in {lib}): "
            "run ./bootstrap.sh peers"
        )
    return lib


def classpath(*names: str) -> str:
    """A ``java -cp`` value holding every jar of the named sets."""
    return os.pathsep.join(str(lib_dir(n) / "*") for n in names)


def resolve(name: str) -> Path:
    """Resolve set ``name`` with Maven into its cache folder (the set-up step)."""
    pom = INTEROP / name / "pom.xml"
    final = cache_root() / f"{name}-{pom_hash(pom)}"
    lib = final / "lib"
    if (lib / ".complete").exists():
        return lib
    if shutil.which("mvn") is None:
        raise PeerMissing("Maven (mvn) is needed to resolve the JVM peers: apt-get install maven")
    # Resolved into a folder of this process's own, then renamed into place: two set-up
    # steps running at once (two checkouts on one machine) never copy into one folder.
    final.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="lib.", dir=final))
    print(f"peers: resolving interop/{name} into {lib}", file=sys.stderr, flush=True)
    try:
        subprocess.run(
            [
                "mvn",
                "-q",
                "-B",
                "-Dstyle.color=never",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={work}",
                "-DincludeScope=runtime",
            ],
            check=True,
        )
        (work / ".complete").write_text(pom_hash(pom) + "\n")
        if (lib / ".complete").exists():  # another set-up step finished first
            return lib
        if lib.exists():  # an interrupted resolve of an older tool version
            shutil.rmtree(lib)
        try:
            work.rename(lib)
        except OSError:  # renamed by another set-up step between the look and the rename
            if not (lib / ".complete").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return lib


def venv_sets() -> list[str]:
    """Every set under ``interop/`` that is a Python virtualenv (a ``requirements.txt``)."""
    return sorted(p.parent.name for p in INTEROP.glob("*/requirements.txt"))


def venv_python(name: str) -> Path:
    """The Python of the virtualenv of set ``name``; :class:`PeerMissing` if not made."""
    req = INTEROP / name / "requirements.txt"
    if not req.is_file():
        raise PeerMissing(f"no pinned set interop/{name}/requirements.txt in this checkout")
    folder = cache_root() / f"venv-{name}-{pom_hash(req)}"
    if not (folder / ".complete").exists():
        raise PeerMissing(
            f"the virtualenv of interop/{name} is not made (expected in {folder}): "
            "run ./bootstrap.sh peers"
        )
    return folder / "bin" / "python"


def make_venv(name: str) -> Path:
    """Create set ``name``'s virtualenv from its pinned requirements (the set-up step)."""
    req = INTEROP / name / "requirements.txt"
    folder = cache_root() / f"venv-{name}-{pom_hash(req)}"
    if (folder / ".complete").exists():
        return folder / "bin" / "python"
    if folder.exists():
        shutil.rmtree(folder)
    print(
        f"peers: making the virtualenv of interop/{name} in {folder}", file=sys.stderr, flush=True
    )
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    subprocess.run(
        [str(folder / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(req)], check=True
    )
    (folder / ".complete").write_text(pom_hash(req) + "\n")
    return folder / "bin" / "python"


def main() -> int:
    for name in sets():
        try:
            resolve(name)
        except (subprocess.CalledProcessError, PeerMissing) as exc:
            print(f"peers: resolving interop/{name} failed: {exc}", file=sys.stderr)
            return 1
    for name in venv_sets():
        try:
            make_venv(name)
        except subprocess.CalledProcessError as exc:
            print(f"peers: resolving interop/{name} failed: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
