"""pivotgym: multi-turn text environments, functional verifiers and the PivotRL method for agentic RL.

Importing the package registers every installed plugin's envs with gymnasium, so both
``pivotgym.make("planning/blocks-v0")`` and ``gymnasium.make("pivotgym:planning/blocks-v0")`` work. A plugin
that fails to load is recorded (``pivotgym plugins`` shows it), never raised here.

This module is the package facade: it re-exports the public API below and no ``pivotgym.X`` module imports
it. The rest lives in modules and subpackages, lowest layer first (``docs/architecture.md``, "Layers"):

* :mod:`pivotgym.errors` - :class:`~pivotgym.errors.PivotgymError`, the base of every error raised on purpose;
  :mod:`pivotgym.config` - the one loader of YAML config files into checked dataclasses;
* :mod:`pivotgym.types` and :mod:`pivotgym.env` - the records (``Task``, ``Trajectory``, ``Turn``,
  ``Verdict``, ...) and :class:`AgentEnv`; :mod:`pivotgym.parsing` - the ``<tool_call>`` codec;
* :mod:`pivotgym.verify` - the verifier protocol, :class:`VerifyContext` and the judge (the one *undecided*
  rule, the verifier and context caches); :mod:`pivotgym.sampling` - samplers and the default model;
* :mod:`pivotgym.plugins` and :mod:`pivotgym.registry` - plugin loading and every registered id;
* :mod:`pivotgym.checker` (the contract checks), :mod:`pivotgym.eval` (suites, the episode loop, scoring,
  comparison), :mod:`pivotgym.pivot` (profiling and selecting pivots), :mod:`pivotgym.train` (trainers);
* :mod:`pivotgym.experiment` - the whole comparison for one domain, its run folder and report;
* :mod:`pivotgym.cli` - the ``pivotgym`` command.
"""

from __future__ import annotations

from pivotgym._version import __version__
from pivotgym.declarative import AnswerVerifier, DeclarativeEnv, EnvConfig
from pivotgym.env import AgentEnv, InvalidAction, StepOutcome
from pivotgym.eval.scoring import generate_single
from pivotgym.hookspecs import hookimpl
from pivotgym.jsonl import read_jsonl, write_jsonl
from pivotgym.mcp import McpEnv, McpEnvConfig, McpError, McpResultVerifier, McpServer
from pivotgym.registry import (
    get_registry,
    list_envs,
    list_plugins,
    make,
    make_sampler,
    make_user_simulator,
    make_verifier,
    register,
    verifier_for,
)
from pivotgym.sampling.base import SamplingParams
from pivotgym.sampling.models import cache_root
from pivotgym.states import expert_states
from pivotgym.types import (
    Completion,
    ExpertState,
    Message,
    PivotSet,
    Task,
    ToolCall,
    Trajectory,
    Turn,
    TurnProfile,
    Verdict,
)
from pivotgym.verify import ExactMatchVerifier, Verifier, VerifyContext


def check_env(env, **kwargs):
    """Run the text-env checks on an env or env id; see :func:`pivotgym.checker.check_env`."""
    from pivotgym.checker import check_env as _check_env

    return _check_env(env, **kwargs)


__all__ = [
    "McpEnv",
    "McpEnvConfig",
    "McpError",
    "McpResultVerifier",
    "McpServer",
    "AgentEnv",
    "AnswerVerifier",
    "Completion",
    "DeclarativeEnv",
    "EnvConfig",
    "ExactMatchVerifier",
    "ExpertState",
    "InvalidAction",
    "Message",
    "PivotSet",
    "SamplingParams",
    "StepOutcome",
    "Task",
    "ToolCall",
    "Trajectory",
    "Turn",
    "TurnProfile",
    "Verdict",
    "Verifier",
    "VerifyContext",
    "__version__",
    "cache_root",
    "check_env",
    "expert_states",
    "generate_single",
    "get_registry",
    "hookimpl",
    "list_envs",
    "list_plugins",
    "make",
    "make_sampler",
    "make_user_simulator",
    "make_verifier",
    "read_jsonl",
    "register",
    "verifier_for",
    "write_jsonl",
]

# Make every registered env reachable through gymnasium.make("pivotgym:<id>"). Plugin errors are recorded
# (see `pivotgym plugins`), never raised here.
get_registry()
