"""``pivotgym serve``: envs and verifiers over HTTP, for trainers and samplers in other processes or machines.

:func:`create_app` builds the ASGI app (FastAPI; ``uvicorn`` serves it), :class:`ServeConfig` holds its
limits and :class:`SessionManager` the open env sessions. The routes, limits and errors are described in
docs/serve.md; :mod:`pivotgym.remote` is the Python client (a ``gymnasium.Env``).
"""

from __future__ import annotations

from pivotgym.serve.app import create_app
from pivotgym.serve.sessions import ServeConfig, ServeError, SessionManager, jsonable

__all__ = ["ServeConfig", "ServeError", "SessionManager", "create_app", "jsonable"]
