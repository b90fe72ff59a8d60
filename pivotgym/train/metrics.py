"""Metrics sinks: JSON lines always, TensorBoard and Weights & Biases when installed and asked for.

``report_to: [auto]`` (the default) adds TensorBoard when ``tensorboard`` is importable and W&B when
``wandb`` is importable and configured (``WANDB_API_KEY`` or ``WANDB_MODE`` set), so a run never stops to
ask for a login. Only the main process writes.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from pivotgym.jsonl import JsonlAppender, iter_jsonl, write_jsonl


def _wandb_ready() -> bool:
    return importlib.util.find_spec("wandb") is not None and bool(
        os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE")
    )


def resolve_sinks(report_to: list[str]) -> list[str]:
    """The extra sinks to use (``tensorboard``, ``wandb``) for a ``report_to`` list."""
    sinks: list[str] = []
    wanted = {s.lower() for s in report_to}
    if "none" in wanted:
        return sinks
    if "tensorboard" in wanted or ("auto" in wanted and importlib.util.find_spec("tensorboard") is not None):
        sinks.append("tensorboard")
    if "wandb" in wanted or ("auto" in wanted and _wandb_ready()):
        sinks.append("wandb")
    return sinks


class MetricsLogger:
    """Writes one JSON row per logged step to ``metrics.jsonl`` (and to TensorBoard/W&B when enabled).

    On resume, rows past the checkpoint's step are dropped first, so the file never holds a step twice.
    """

    def __init__(
        self,
        output_dir: str | Path,
        *,
        report_to: list[str],
        enabled: bool = True,
        resume_step: int | None = None,
        run_name: str = "pivotgym",
        config: dict[str, Any] | None = None,
    ) -> None:
        self.enabled = enabled
        self.path = Path(output_dir) / "metrics.jsonl"
        self._tb: Any = None
        self._wandb: Any = None
        self._jsonl: JsonlAppender | None = None
        if not enabled:
            return
        if resume_step is not None and self.path.exists():
            kept = [r for r in iter_jsonl(self.path) if int(r.get("step", 0)) <= resume_step]
            write_jsonl(self.path, kept)
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self._jsonl = JsonlAppender(self.path)
        sinks = resolve_sinks(report_to)
        if "tensorboard" in sinks:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(Path(output_dir) / "tensorboard"))
        if "wandb" in sinks:
            import wandb

            self._wandb = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "pivotgym"), name=run_name, config=config or {}, resume="allow"
            )

    def log(self, row: dict[str, Any]) -> None:
        if not self.enabled or self._jsonl is None:
            return
        self._jsonl.write(row)
        step = int(row.get("step", 0))
        numeric = {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self._tb is not None:
            for key, value in numeric.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(numeric, step=step)

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


__all__ = ["MetricsLogger", "resolve_sinks"]
