"""``pivotgym eval`` builds its sampler through the sampler registry (``--sampler``, default ``hf``), so a
plugin's backend evaluates like the built-in one."""

from __future__ import annotations

import json

import pytest

from pivotgym.cli import main
from pivotgym.registry import Entry, get_registry
from pivotgym.types import Completion


class EchoSampler:
    """A registered test backend: answers ``(A)`` and remembers how it was built."""

    built: list[dict] = []

    def __init__(self, model: str, max_batch_size: int = 1) -> None:
        EchoSampler.built.append({"model": model, "max_batch_size": max_batch_size})
        self.model = model

    def describe(self) -> dict[str, str]:
        return {"model": self.model, "backend": "echo"}

    def sample(self, prompts, n=1, params=None):
        return [[Completion("(A)")] for _ in prompts]


@pytest.fixture()
def echo(monkeypatch):
    EchoSampler.built.clear()
    monkeypatch.setitem(get_registry().samplers, "echo", Entry("echo", EchoSampler, "tests"))


def test_eval_uses_the_sampler_named_by_the_option(echo, tmp_path, capsys):
    out = tmp_path / "scores.json"
    assert (
        main(
            [
                "eval",
                "--suite",
                "ood-quick",
                "--sampler",
                "echo",
                "--model",
                "served-name",
                "--out",
                str(out),
                "--limit",
                "2",
                "--member",
                "general/navigate-v0",
                "--batch-size",
                "4",
                "--json",
            ]
        )
        == 0
    )
    # the backend got the model name as is (not resolved as a local model) and the options it declares
    assert EchoSampler.built == [{"model": "served-name", "max_batch_size": 16}]
    saved = json.loads(out.read_text())
    assert saved["sampler"] == {"model": "served-name", "backend": "echo"}
    assert saved["scores"]["general/navigate-v0"]["n"] == 2 and capsys.readouterr().out


def test_an_option_the_backend_does_not_take_is_one_line(echo, tmp_path, capsys):
    assert (
        main(
            ["eval", "--suite", "ood-quick", "--sampler", "echo", "--device", "cpu", "--out", str(tmp_path / "s.json")]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("error: sampler 'echo' takes no --device") and len(err.strip().splitlines()) == 1
    assert EchoSampler.built == []


def test_an_unknown_sampler_says_how_to_list_them(tmp_path, capsys):
    assert main(["eval", "--suite", "ood-quick", "--sampler", "nope", "--out", str(tmp_path / "s.json")]) == 1
    err = capsys.readouterr().err
    assert "unknown sampler 'nope'" in err and "pivotgym samplers" in err and len(err.strip().splitlines()) == 1


def test_an_unknown_model_fails_before_the_hf_backend_loads(tmp_path, capsys):
    assert (
        main(["eval", "--suite", "ood-quick", "--model", str(tmp_path / "missing"), "--out", str(tmp_path / "s.json")])
        == 1
    )
    assert capsys.readouterr().err.startswith("error: ")
