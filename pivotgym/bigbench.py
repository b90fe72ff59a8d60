"""BIG-bench task files: fetch evaluation data that is too large to ship, from PyPI only.

The library half of ``pivotgym data pull bigbench`` (the command is in :mod:`pivotgym.cli.data`); the YAML
envs of :mod:`pivotgym.declarative` read task files from :func:`bigbench_cache_dir`, else
:func:`shipped_bigbench_dir`.

BIG-bench (Apache-2.0) is published on PyPI only as a 358 MB source distribution whose metadata cannot be
built by pip (it declares a direct-URL dependency), so ``pip download`` refuses it. ``pull_bigbench`` fetches
the same file from the package index pip uses (``$PIP_INDEX_URL``, default PyPI's simple index), checks its
sha256, extracts only the ``task.json`` files asked for into the cache and deletes the tarball.

A subset of each default task (the first rows) ships as package data in ``pivotgym/data/bigbench/`` so that
tests and the quickstart run offline; the pulled full files take precedence when present.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Sequence
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path
from typing import Any

BIGBENCH_SDIST = "bigbench-1.0.0.tar.gz"
BIGBENCH_PROJECT = "bigbench"

#: the tasks the shipped YAML envs use (``task/subtask`` names as in BIG-bench's benchmark_tasks folder)
DEFAULT_BIGBENCH_TASKS = (
    "logical_deduction/three_objects",
    "tracking_shuffled_objects/three_objects",
    "date_understanding",
    "navigate",
    "sports_understanding",
    "object_counting",
    "word_sorting",
)


def bigbench_cache_dir() -> Path:
    """Where pulled BIG-bench task files live: ``<pivotgym cache>/bigbench``."""
    from pivotgym.sampling.models import cache_root

    return cache_root() / "bigbench"


def shipped_bigbench_dir() -> Path:
    """The BIG-bench subsets shipped inside the package."""
    return Path(str(resources.files("pivotgym") / "data" / "bigbench"))


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links += [v for k, v in attrs if k == "href" and v]


def index_url() -> str:
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def sdist_url(filename: str = BIGBENCH_SDIST, project: str = BIGBENCH_PROJECT) -> tuple[str, str | None]:
    """(download URL, expected sha256) of ``filename`` from the index's PEP 503 page for ``project``."""
    page = f"{index_url()}/{project}/"
    with urllib.request.urlopen(page, timeout=60) as resp:
        parser = _Links()
        parser.feed(resp.read().decode("utf-8", "replace"))
    for link in parser.links:
        url, _, frag = link.partition("#")
        if url.rsplit("/", 1)[-1] == filename:
            m = re.match(r"sha256=([0-9a-f]{64})", frag)
            return urllib.parse.urljoin(page, url), (m.group(1) if m else None)
    raise FileNotFoundError(f"{filename} is not listed at {page}; check $PIP_INDEX_URL or pass --sdist PATH")


def download(url: str, dest: Path, sha256: str | None = None) -> Path:
    """Download ``url`` to ``dest`` with a progress bar, verifying ``sha256`` when given."""
    from tqdm import tqdm

    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=120) as resp, dest.open("wb") as fh:
        total = int(resp.headers.get("Content-Length") or 0) or None
        with tqdm(total=total, unit="B", unit_scale=True, desc=f"download {dest.name}", disable=None) as bar:
            while chunk := resp.read(1 << 20):
                fh.write(chunk)
                digest.update(chunk)
                bar.update(len(chunk))
    if sha256 and digest.hexdigest() != sha256:
        dest.unlink()
        raise OSError(f"{dest.name}: sha256 mismatch (got {digest.hexdigest()}, index says {sha256})")
    return dest


def extract_tasks(sdist: Path, tasks: Sequence[str], dest: Path, limit: int | None = None) -> dict[str, int]:
    """Copy the ``task.json`` of each task out of the BIG-bench tarball into ``dest/<task with __>.json``.

    ``limit`` keeps only the first rows (used to make the shipped subsets). Returns rows written per task.
    """
    wanted = {f"benchmark_tasks/{t}/task.json": t for t in tasks}
    dest.mkdir(parents=True, exist_ok=True)
    written: dict[str, int] = {}
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar:
            key = next((w for w in wanted if member.name.endswith("/bigbench/" + w)), None)
            if key is None or not member.isfile():
                continue
            fh = tar.extractfile(member)
            assert fh is not None
            data: dict[str, Any] = json.load(fh)
            task = wanted[key]
            if limit is not None:
                data["examples"] = data["examples"][:limit]
            data["pivotgym_source"] = {
                "sdist": sdist.name,
                "path": member.name,
                "license": "Apache-2.0",
                "rows": len(data["examples"]),
            }
            out = dest / f"{task.replace('/', '__')}.json"
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
            tmp.replace(out)
            written[task] = len(data["examples"])
    missing = sorted(set(tasks) - set(written))
    if missing:
        raise FileNotFoundError(
            f"not in {sdist.name}: {missing}; task names are folders under "
            f"bigbench/benchmark_tasks (e.g. logical_deduction/three_objects)"
        )
    return written


def pull_bigbench(
    tasks: Sequence[str] = DEFAULT_BIGBENCH_TASKS,
    dest: Path | None = None,
    sdist: Path | None = None,
    limit: int | None = None,
) -> dict[str, int]:
    """Fetch the BIG-bench sdist (unless ``sdist`` is given), extract ``tasks`` into ``dest`` (default: the
    cache) and delete the downloaded tarball. Returns rows written per task."""
    dest = dest or bigbench_cache_dir()
    if sdist is not None:
        return extract_tasks(Path(sdist), tasks, dest, limit)
    with tempfile.TemporaryDirectory(prefix="pivotgym-bigbench-") as tmp:
        url, sha = sdist_url()
        path = download(url, Path(tmp) / BIGBENCH_SDIST, sha)
        try:
            return extract_tasks(path, tasks, dest, limit)
        finally:
            path.unlink(missing_ok=True)
