"""Provenance: everything a run's numbers depend on besides its config, recorded in ``config.json`` and the
report (code revision and whether the checkout had local changes, Python and library versions, every
plugin's version, torch threads, dtype, device, sampler backend)."""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["code_revision", "collect", "provenance_lines", "stage_code_lines"]

UNKNOWN = "unknown"


def _git(*args: str, cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def code_revision(path: Path | None = None) -> dict[str, Any]:
    """``{"revision", "dirty"}`` of the git checkout holding ``path`` (default: the pivotgym package):
    ``dirty`` is True when tracked or untracked files differ from the commit; both ``unknown`` outside a
    checkout (an installed wheel)."""
    here = path or Path(__file__).resolve().parent
    revision = _git("rev-parse", "HEAD", cwd=here)
    if revision is None:
        return {"revision": UNKNOWN, "dirty": UNKNOWN}
    status = _git("status", "--porcelain", "--untracked-files=normal", cwd=here)
    return {"revision": revision.strip(), "dirty": UNKNOWN if status is None else bool(status.strip())}


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return UNKNOWN


def collect(sampler: str, dtype: str | None = None, mixed_precision: Sequence[str] = ()) -> dict[str, Any]:
    """The provenance of a run about to start with sampler backend ``sampler``; ``dtype``: the one its samplers
    load models in (``sampler_options``; default: the device's); ``mixed_precision``: its trainers' settings."""
    import torch

    from pivotgym._version import __version__
    from pivotgym.registry import get_registry
    from pivotgym.sampling.models import default_device, default_dtype

    device = default_device()
    plugins = {name: info.version or UNKNOWN for name, info in sorted(get_registry().plugins.infos.items())}
    return {
        "code": code_revision(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {"pivotgym": __version__, "torch": torch.__version__, "transformers": _version("transformers")},
        "plugins": plugins,
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "dtype": str(dtype or default_dtype(device)).removeprefix("torch."),
        "mixed_precision": sorted(set(mixed_precision)),
        "sampler": sampler,
    }


def run_provenance(config: Any) -> dict[str, Any]:
    """:func:`collect` for an experiment config: its sampler, the dtype its ``sampler_options`` load models in,
    and the mixed precision its trainer sections resolve to on this machine."""
    from pivotgym.experiment.config import TRAINER_SECTIONS
    from pivotgym.train.loop import resolved_precision

    precisions = [resolved_precision(getattr(config, name).get("mixed_precision", "auto")) for name in TRAINER_SECTIONS]
    return collect(config.sampler, config.sampler_options.get("dtype"), precisions)


def _revision_text(code: Mapping[str, Any]) -> str:
    dirty = code.get("dirty")
    state = " (with uncommitted changes)" if dirty is True else "" if dirty is False else " (dirty: unknown)"
    return f"revision `{code.get('revision', UNKNOWN)}`{state}"


def provenance_lines(provenance: Mapping[str, Any]) -> list[str]:
    """Markdown bullet lines of a provenance mapping (the report's "Provenance" section): that of the last
    invocation, which wrote the report; :func:`stage_code_lines` says which code computed the stages."""
    versions = provenance.get("versions", {})
    plugins = provenance.get("plugins", {})
    return [
        f"- code of the invocation that wrote this report: {_revision_text(provenance.get('code', {}))}",
        f"- Python {provenance.get('python', UNKNOWN)} on {provenance.get('platform', UNKNOWN)}; "
        + ", ".join(f"{k} {v}" for k, v in versions.items()),
        "- plugins: " + (", ".join(f"{k} {v}" for k, v in plugins.items()) or "none"),
        f"- torch threads {provenance.get('torch_threads', UNKNOWN)}, device {provenance.get('device', UNKNOWN)}, "
        f"dtype {provenance.get('dtype', UNKNOWN)}, training mixed precision "
        f"{', '.join(provenance.get('mixed_precision') or [UNKNOWN])}, sampler `{provenance.get('sampler', UNKNOWN)}`",
    ]


def stage_code_lines(stage_code: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown bullet lines saying which code computed a run's finished stages: one line when one revision
    computed them all, else one per revision with its stages (a run resumed across code changes, whose
    numbers are not all from the code of the last invocation). ``stage_code``: ``{"revision", "dirty",
    "stages"}`` per revision, as the report collects them from the stage records."""
    if not stage_code:
        return []
    if len(stage_code) == 1:
        return [f"- every stage computed by {_revision_text(stage_code[0])}"]
    lines = [f"- stages computed by {len(stage_code)} code revisions (a run resumed across code changes):"]
    return lines + [f"  - {_revision_text(c)}: {', '.join(c['stages'])}" for c in stage_code]
