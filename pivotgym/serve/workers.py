"""``pivotgym serve --workers N``: N server processes behind one port, each session pinned to the one that holds it.

Env steps run Python code under the GIL, so one server process uses about one core however many sessions it
holds; N processes use N. The parent binds the public port once per worker (``SO_REUSEPORT``: the kernel spreads
new connections over the workers' sockets) and one private port per worker, then starts the workers
(``spawn``), each serving its two sockets; a worker ends when the parent does, and the parent stops its workers
on Ctrl-C or SIGTERM. Sessions live in the process that created them:

* a session's id starts with ``w<index>-``, and ``POST /sessions`` answers with ``worker_url``, that process's
  own URL; :class:`~pivotgym.remote.RemoteEnv` and :class:`~pivotgym.remote.AsyncRemoteEnv` send every later
  request of the session there;
* any other client reaching the wrong process for a session through the public port gets a 307 redirect to the
  right one (:class:`~pivotgym.serve.app.WorkerRouter`), which keeps the method and the body (a redirect to
  another port drops an ``Authorization`` header in most clients: with ``--token``, follow ``worker_url``);
* routes without a session (``/verify``, NeMo-Gym's routes, OpenEnv's WebSocket, whose session lives as long as
  its connection) are answered by whichever process accepts the connection.

``--max-sessions`` holds per worker (the kernel spreads connections by a hash, not evenly enough for a split cap
to be reliable), so N workers hold up to N times as many. ``GET /sessions`` lists the sessions of the process
that answers.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import socket

from pivotgym.serve.sessions import ServeConfig


def _bind(host: str, port: int, *, share: bool = False) -> socket.socket:
    """A listening socket on ``host:port``; ``share``: with ``SO_REUSEPORT``, so each worker has its own socket
    on the public port and the kernel spreads new connections over them evenly."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and without it every answer
    # waited for the client's delayed ACK (44 ms a request instead of 2; benchmarks/serve_scale.py)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if share:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _url_host(host: str) -> str:
    """The host a client can reach a worker's private port at: the address bound, or this machine's name for a
    wildcard address."""
    if host in ("0.0.0.0", "::", ""):
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host


def _exit_with_parent(parent: int) -> None:
    """End this worker when the process that started it is gone (killed without the chance to stop it)."""
    import os
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _serve(config: ServeConfig, sockets: list[socket.socket], log_level: str, parent: int) -> None:
    import uvicorn

    from pivotgym.serve.app import create_app

    _exit_with_parent(parent)
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), log_level=log_level, timeout_graceful_shutdown=5, lifespan="on")
    )
    server.run(sockets=sockets)


def worker_configs(config: ServeConfig, urls: tuple[str, ...]) -> list[ServeConfig]:
    """Each worker's config: its index and every worker's URL (the limits are each worker's own)."""
    return [dataclasses.replace(config, worker=i, worker_urls=urls) for i in range(len(urls))]


def run_workers(config: ServeConfig, host: str, port: int, workers: int, log_level: str = "warning") -> None:
    """Serve ``config`` from ``workers`` processes on ``host:port`` until interrupted (see the module docstring)."""
    if workers < 2:
        raise ValueError(f"run_workers needs at least 2 workers, got {workers}")
    public = [_bind(host, port, share=True) for _ in range(workers)]
    private = [_bind(host, 0) for _ in range(workers)]
    urls = tuple(f"http://{_url_host(host)}:{sock.getsockname()[1]}" for sock in private)
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(
            target=_serve, args=(cfg, [public[i], private[i]], log_level, os.getpid()), name=f"pivotgym-serve-w{i}"
        )
        for i, cfg in enumerate(worker_configs(config, urls))
    ]

    def stop(signum: int, frame: object) -> None:  # SIGTERM: stop the workers as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join()
    except KeyboardInterrupt:
        pass
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=10)
        for sock in [*public, *private]:
            sock.close()


__all__ = ["run_workers", "worker_configs"]
