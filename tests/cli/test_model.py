"""`pivotgym model list|pull` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from pivotgym.cli import main


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_model_list_json_reports_the_cache_state(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PIVOTGYM_CACHE", str(tmp_path))
    code, out, _ = _run(capsys, "model", "list", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["alias"] for r in rows] == ["smollm2-135m"]
    assert rows[0]["default"] is True and rows[0]["converted"] is False
    assert rows[0]["path"] == str(tmp_path / "models" / "smollm2-135m")


def test_model_pull_unknown_name_is_a_user_error(capsys, monkeypatch):
    """A name that is not bundled is taken as a hub id (naming it opts in to the download); when the hub does
    not have it, the error is one line naming it."""
    import huggingface_hub

    def missing(repo_id, **kwargs):
        raise OSError(f"Repository Not Found for {repo_id}")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", missing)
    code, _, err = _run(capsys, "model", "pull", "no-such-model")
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "no-such-model" in lines[0], lines


@pytest.fixture(scope="module")
def converted_default_model():
    """The default model converted into the default cache (once; the slow sampling tests share that folder)."""
    from pivotgym.sampling.models import pull_model

    return pull_model(progress=False)


@pytest.mark.slow
def test_model_pull_second_call_is_instant(capsys, converted_default_model):
    code, out, _ = _run(capsys, "model", "pull", "--json")
    assert code == 0
    info = json.loads(out)
    assert info["already_cached"] is True and info["converted"] is True and info["seconds"] < 1.0
    code, out, _ = _run(capsys, "model", "list")
    assert code == 0 and "smollm2-135m (default)" in out and "yes" in out
