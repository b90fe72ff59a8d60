"""Container images built on this machine, with no registry: a Debian base image and recipes ``FROM`` it.

Nothing here pulls. The base image is made from Debian packages: ``debootstrap --variant=minbase`` into a
temporary directory (from the mirror the host's apt already uses), then ``docker import`` of its tar. It is
tagged :data:`BASE_IMAGE` and labelled with the digest of its recipe (suite and packages), so it is rebuilt
only when that recipe changes. A domain brings an :class:`ImageRecipe`: a Dockerfile ``FROM`` the base and
the files its ``COPY`` lines read. Its tag is the digest of the Dockerfile, the files' bytes and the base's
recipe (``pivotgym/<name>:<digest>``): an image of a recipe is built once and found again by name; a changed
recipe is a new tag. A build that fails raises :class:`ImageBuildError` with the tail of the build log, and
the layers it committed are removed.

Every engine call goes through the ``docker`` command-line client (Debian's ``docker.io`` ships it):
:func:`engine_problem` says why there is no usable engine, in words that say how to get one.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pivotgym.errors import SandboxError, SandboxUnavailable

BASE_REPOSITORY = "pivotgym/base"
BASE_SUITE = "bookworm"
#: what the base image holds besides Debian's minimal base: an interpreter for Python commands
BASE_PACKAGES = ("python3",)
BASE_IMAGE = f"{BASE_REPOSITORY}:{BASE_SUITE}"
RECIPE_LABEL = "org.pivotgym.recipe"
BUILD_COMMAND = "make docker  (or: pivotgym sandbox build)"
ENGINE_TIMEOUT = 20.0
LOG_TAIL_LINES = 40

Log = Callable[[str], None]


class ImageBuildError(SandboxError):
    """An image could not be built; the message carries the tail of the build log."""


def docker_cli() -> str:
    """The path of the ``docker`` client, or :class:`SandboxUnavailable` saying how to install one."""
    exe = shutil.which("docker")
    if exe is None:
        raise SandboxUnavailable(
            "the docker backend needs the `docker` client and engine: `apt-get install docker.io` (as root), "
            "or `make docker`, which also starts the engine and builds the base image"
        )
    return exe


def docker(*args: str, timeout: float = ENGINE_TIMEOUT, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """Run ``docker ARGS`` and return what it did (never raises on a non-zero exit; raises
    :class:`SandboxUnavailable` when the client is missing and :class:`SandboxError` when it hangs)."""
    try:
        return subprocess.run(
            [docker_cli(), *args],
            input=stdin,
            capture_output=True,
            timeout=timeout,
            env={**os.environ, "DOCKER_BUILDKIT": "0"},  # the classic builder: no buildx plugin needed
        )
    except subprocess.TimeoutExpired as exc:
        raise SandboxError(
            f"`docker {' '.join(args[:2])}` did not answer in {timeout:.0f} s: is the engine hung?"
        ) from exc


def engine_problem() -> str | None:
    """Why the docker backend cannot run here (no client, no reachable engine), or None when it can."""
    try:
        done = docker("version", "--format", "{{.Server.Version}}", timeout=10.0)
    except (SandboxUnavailable, SandboxError) as exc:
        return str(exc)
    if done.returncode != 0 or not done.stdout.strip():
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        return (
            f"no reachable Docker engine ({detail[-1] if detail else 'no answer'}); start one with `dockerd &` "
            "as root, or run `make docker`, or point DOCKER_HOST at one"
        )
    return None


def image_exists(tag: str) -> bool:
    return docker("image", "inspect", "--format", "{{.Id}}", tag).returncode == 0


def image_label(tag: str, label: str = RECIPE_LABEL) -> str | None:
    """The value of ``label`` on image ``tag`` (None when the image is missing or has no such label)."""
    done = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', tag)
    value = done.stdout.decode().strip()
    return value if done.returncode == 0 and value and value != "<no value>" else None


def missing_image_message(tag: str) -> str:
    """What to say when ``tag`` is not on this engine (nothing is ever pulled)."""
    if tag == BASE_IMAGE:
        return f"the Docker image {tag} is not built on this engine; build it with `{BUILD_COMMAND}`"
    return (
        f"the Docker image {tag} is not on this engine, and the docker backend never pulls; build it "
        f"(`docker build -t {tag} ...`) or load it (`docker load -i FILE`)"
    )


# ------------------------------------------------------------------------------------------ the base image
@dataclass(frozen=True)
class BaseRecipe:
    """How the base image is made: ``debootstrap --variant=minbase --include=PACKAGES SUITE``, with ``/root``
    traversable (mode 0755, empty), so a host tree under it bound at its own path is reachable by a sandbox
    uid."""

    suite: str = BASE_SUITE
    packages: tuple[str, ...] = BASE_PACKAGES
    tag: str = BASE_IMAGE

    @property
    def digest(self) -> str:
        text = f"debootstrap minbase {self.suite} {','.join(sorted(self.packages))}; /root 0755"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def apt_mirror(sources: tuple[str, ...] = ("/etc/apt/sources.list.d", "/etc/apt/sources.list")) -> str:
    """The Debian mirror the host's apt uses (deb822 ``URIs:`` or one-line ``deb URI suite`` entries, the first
    that is not a security mirror): debootstrap reaches what apt reaches."""
    files: list[Path] = []
    for entry in map(Path, sources):
        if entry.is_dir():
            files += sorted(p for p in entry.iterdir() if p.suffix in (".sources", ".list"))
        elif entry.is_file():
            files.append(entry)
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        found = re.findall(r"^URIs:\s*(\S+)", text, re.M) + re.findall(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)", text, re.M)
        for uri in found:
            if "security" not in uri:
                return uri
    return "http://deb.debian.org/debian"


def ensure_base_image(recipe: BaseRecipe | None = None, *, log: Log = print, mirror: str | None = None) -> str:
    """The base image's tag, building it first when it is missing or was made from another recipe (needs root
    and ``debootstrap``; about a minute on these machines)."""
    recipe = recipe or BaseRecipe()
    if image_label(recipe.tag) == recipe.digest:
        return recipe.tag
    problems = []
    if os.geteuid() != 0:
        problems.append("debootstrap needs root")
    if shutil.which("debootstrap") is None:
        problems.append("`debootstrap` is not installed (`apt-get install debootstrap`)")
    if problems:
        raise SandboxUnavailable(f"cannot build the base image {recipe.tag}: " + "; ".join(problems))
    mirror = mirror or apt_mirror()
    superseded = docker("image", "inspect", "--format", "{{.Id}}", recipe.tag).stdout.decode().strip()
    log(f"building {recipe.tag}: debootstrap {recipe.suite} from {mirror} ...")
    with tempfile.TemporaryDirectory(prefix="pivotgym-rootfs-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "rootfs"
        include = f"--include={','.join(recipe.packages)}" if recipe.packages else ""
        argv = ["debootstrap", "--variant=minbase", *([include] if include else []), recipe.suite, str(root), mirror]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageBuildError(f"debootstrap failed (exit {done.returncode}):\n{_tail(done.stdout + done.stderr)}")
        # host trees bound at their own path (a pyenv interpreter under /root) must be reachable by any uid
        (root / "root").chmod(0o755)
        log(f"importing {recipe.tag} ...")
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [docker_cli(), "import", "--change", f"LABEL {RECIPE_LABEL}={recipe.digest}", "-", recipe.tag],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
        )
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise ImageBuildError(f"docker import of {recipe.tag} failed:\n{_tail(imported.stderr)}")
    if superseded:  # the image of the older recipe, untagged now: removed unless something still uses it
        docker("rmi", superseded)
    log(f"built {recipe.tag}")
    return recipe.tag


# ------------------------------------------------------------------------------------------ recipes FROM it
@dataclass(frozen=True)
class ImageRecipe:
    """A domain image: ``dockerfile`` (its ``FROM`` is :data:`BASE_IMAGE` unless it names another local image)
    and the build context's files, ``{path in the context: host file or bytes}``."""

    name: str
    dockerfile: str
    files: Mapping[str, Path | bytes] = field(default_factory=dict)
    base: BaseRecipe = field(default_factory=BaseRecipe)

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        h.update(self.base.digest.encode() + b"\0" + self.dockerfile.encode() + b"\0")
        for rel in sorted(self.files):
            h.update(rel.encode() + b"\0")
            source = self.files[rel]
            if isinstance(source, bytes):
                h.update(hashlib.sha256(source).digest())
            else:
                st = os.stat(source)
                h.update(f"{st.st_mode:o}:{st.st_size}:".encode())
                h.update(_file_digest(Path(source)))
        return h.hexdigest()[:16]

    @property
    def tag(self) -> str:
        return f"pivotgym/{self.name}:{self.digest}"


def _file_digest(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.digest()


def context_tar(recipe: ImageRecipe) -> bytes:
    """The build context as a tar: the Dockerfile and the recipe's files (owned by root, modes kept)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_bytes(tar, "Dockerfile", recipe.dockerfile.encode(), 0o644)
        for rel in sorted(recipe.files):
            source = recipe.files[rel]
            if isinstance(source, bytes):
                _add_bytes(tar, rel, source, 0o644)
                continue
            info = tar.gettarinfo(str(source), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isfile():
                with open(source, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    return buf.getvalue()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def ensure_image(recipe: ImageRecipe, *, log: Log = print, timeout: float = 1800.0) -> str:
    """The tag of ``recipe``'s image, building it first when it is not on the engine (the base image too)."""
    if image_exists(recipe.tag):
        return recipe.tag
    ensure_base_image(recipe.base, log=log)
    log(f"building {recipe.tag} ...")
    before = set(_all_image_ids())
    done = docker(
        "build",
        "--rm",
        "--force-rm",
        "--network",
        "bridge",
        "--label",
        f"{RECIPE_LABEL}={recipe.digest}",
        "-t",
        recipe.tag,
        "-",
        stdin=context_tar(recipe),
        timeout=timeout,
    )
    if done.returncode != 0:
        text = (done.stdout + done.stderr).decode(errors="replace")
        # the layers of the steps that succeeded before the one that failed: new, and named by this build's log
        named = set(re.findall(r"^ ---> ([0-9a-f]{12})$", text, re.M))
        leftovers = [i for i in _all_image_ids() if i not in before and i.removeprefix("sha256:")[:12] in named]
        if leftovers:
            docker("rmi", "--force", *leftovers)
        raise ImageBuildError(
            f"building {recipe.tag} failed (exit {done.returncode}); the build log ends:\n{_tail(text)}"
        )
    log(f"built {recipe.tag}")
    return recipe.tag


def _all_image_ids() -> list[str]:
    done = docker("images", "--all", "--quiet", "--no-trunc")
    return done.stdout.decode().split() if done.returncode == 0 else []


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
