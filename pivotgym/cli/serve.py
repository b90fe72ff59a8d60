"""``pivotgym serve``: serve envs and verifiers over HTTP (routes, limits and the client: docs/serve.md)."""

from __future__ import annotations

import typer

from pivotgym.cli.output import CLIError
from pivotgym.remote import TOKEN_ENV
from pivotgym.serve.sessions import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_PORT,
)


def serve_cmd(
    host: str = typer.Option(
        "127.0.0.1", help="Address to listen on; any but a loopback address needs --token (or $PIVOTGYM_SERVE_TOKEN)."
    ),
    port: int = typer.Option(DEFAULT_PORT, help="TCP port (vLLM's server takes 8000)."),
    max_sessions: int = typer.Option(DEFAULT_MAX_SESSIONS, help="Most env sessions open at once (429 beyond)."),
    workers: int = typer.Option(
        1, help="Server processes behind the port, each session pinned to its own (env steps use one core each)."
    ),
    idle_timeout: float = typer.Option(
        DEFAULT_IDLE_TIMEOUT, help="Seconds without a request after which a session is closed."
    ),
    step_timeout: float | None = typer.Option(
        None, help="Upper bound on every session's step deadline in seconds (default: each env's own)."
    ),
    max_body_bytes: int = typer.Option(DEFAULT_MAX_BODY_BYTES, help="Largest request body accepted (413 beyond)."),
    nemo_env: str | None = typer.Option(
        None, help="Env whose verifier judges NeMo-Gym /verify rows that name none, e.g. tooluse/bfcl-simple-v0."
    ),
    log_level: str = typer.Option("warning", help="uvicorn's log level (info logs every request)."),
    token: str | None = typer.Option(
        None,
        envvar=TOKEN_ENV,
        help="Token every request but /health must carry (Authorization: Bearer). Required off loopback.",
        show_default=False,
    ),
) -> None:
    """Serve env sessions (reset/step/close), verification and NeMo-Gym's /verify over HTTP."""
    from pivotgym.serve import ServeConfig, create_app

    if not 1 <= port <= 65535:
        raise CLIError(f"--port must be between 1 and 65535, got {port}")
    if workers < 1:
        raise CLIError(f"--workers must be at least 1, got {workers}")
    if not token and not is_loopback(host):
        raise CLIError(
            f"--host {host} would serve env sessions and verification to the network without authentication",
            hint=f"give --token (or set {TOKEN_ENV}; clients send it as `Authorization: Bearer`), or bind 127.0.0.1",
        )
    try:
        config = ServeConfig(
            max_sessions=max_sessions,
            idle_timeout=idle_timeout,
            step_timeout=step_timeout,
            max_body_bytes=max_body_bytes,
            nemo_env=nemo_env,
            token=token or None,
        )
    except ValueError as exc:
        raise CLIError(str(exc), hint="see `pivotgym serve --help`") from None
    if nemo_env is not None:
        from pivotgym.registry import get_registry

        get_registry().env_spec(nemo_env)  # an unknown id fails now, with the list of ids
    import uvicorn

    typer.echo(
        f"pivotgym serve on http://{host}:{port} (max {max_sessions} sessions, idle timeout {idle_timeout:g}s"
        f"{f', {workers} workers' if workers > 1 else ''}{', token required' if token else ''}); "
        "Ctrl-C stops it",
        err=True,
    )
    if workers > 1:
        from pivotgym.serve.workers import run_workers

        run_workers(config, host, port, workers, log_level)
        return
    uvicorn.run(create_app(config), host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def register(app: typer.Typer) -> None:
    """Add ``serve``."""
    app.command("serve")(serve_cmd)
