"""The run's ownership of the engines it opens: what :meth:`Run.release_samplers` closes and what it keeps."""

from __future__ import annotations

import pytest

from pivotgym.experiment.config import load_experiment
from pivotgym.experiment.run import Run


class Engine:
    """Stands in for a sampler or trainer with an engine; records the order in which engines were closed."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def close(self) -> None:
        self.log.append(self.name)


@pytest.fixture()
def run_of(tmp_path, mini_experiment, monkeypatch):
    def make(sampler: str) -> tuple[Run, list[str]]:
        config = load_experiment(mini_experiment(tmp_path / f"{sampler}.yaml", sampler=sampler))
        run, log = Run(config, tmp_path / sampler), []
        built = iter(range(100))
        monkeypatch.setattr(run, "_build_sampler", lambda model: Engine(f"sampler {next(built)}", log))
        return run, log

    return make


def test_release_closes_what_the_run_opened_newest_first_and_only_once(run_of):
    run, log = run_of("vllm")
    base = run.base_sampler()
    sampler = run.make_sampler("some/model")
    trainer = run.own(Engine("trainer", log))
    assert run.base_sampler() is base  # cached until released
    run.release_samplers()
    assert log == ["trainer", sampler.name, base.name]
    run.release_samplers()
    assert len(log) == 3  # closed once
    assert run.base_sampler() is not base  # a closed engine is never handed out again
    run.close()
    assert log[-1] == "sampler 2" and trainer.name in log


def test_the_cheap_hf_base_sampler_outlives_a_release(run_of):
    run, log = run_of("hf")
    base = run.base_sampler()
    other = run.make_sampler("some/model")
    run.release_samplers()
    assert log == [other.name]
    assert run.base_sampler() is base
