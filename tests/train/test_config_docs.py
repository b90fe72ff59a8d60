"""docs/training.md's config tables are generated from the config dataclasses and kept in step with them."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_config_docs.py"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_config_docs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing look modules up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_training_md_config_tables_are_up_to_date(gen):
    current = gen.DOC.read_text(encoding="utf-8")
    assert gen.updated(current) == current, (
        "docs/training.md's config tables are stale (a config field, default or `#:` comment changed); "
        "regenerate them with `python scripts/gen_config_docs.py`"
    )


def test_every_field_is_in_the_tables_with_a_default_that_reads_back_from_yaml(gen):
    import importlib

    text = gen.render()
    for module, name, _heading in gen.SECTIONS:
        cls = getattr(importlib.import_module(module), name)
        own = gen.attribute_comments(gen._module_file(module))[name]
        for f in dataclasses.fields(cls):
            if (name, f.name) in gen.SKIP or f.name not in own:
                continue
            assert f"| `{f.name}` |" in text
            default = gen._default(f)
            if default != "required":
                expected = f.default if f.default is not dataclasses.MISSING else f.default_factory()
                value = yaml.safe_load(default.strip("`"))
                if dataclasses.is_dataclass(expected):  # a config section: its fields' defaults
                    expected = dataclasses.asdict(expected)
                assert value == (list(expected) if isinstance(expected, tuple) else expected), (name, f.name)


def test_only_the_marked_section_is_rewritten(gen):
    doc = f"# Title\nkept above\n{gen.START}\nstale table\n{gen.END}\nkept below\n"
    new = gen.updated(doc)
    assert new.startswith(f"# Title\nkept above\n{gen.START}\n") and new.endswith(f"{gen.END}\nkept below\n")
    assert "stale table" not in new and "| `learning_rate` | `float` | `1.0e-05` |" in new
    with pytest.raises(gen.DocError, match="config-table:start"):
        gen.updated("# no markers\n")


def test_a_field_without_a_meaning_is_named(gen, tmp_path, monkeypatch):
    (tmp_path / "cfgmod_docs_test.py").write_text(
        "from dataclasses import dataclass\n\n\n@dataclass\nclass C:\n"
        "    #: documented\n    #: over two lines\n    a: int = 1\n    b: str | None = None\n"
    )
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "SECTIONS", [("cfgmod_docs_test", "C", "C")])
    monkeypatch.syspath_prepend(str(tmp_path))
    assert gen.attribute_comments(tmp_path / "cfgmod_docs_test.py")["C"] == {
        "a": ("int", "documented over two lines"),
        "b": ("str | None", ""),
    }
    with pytest.raises(gen.DocError, match=r"cfgmod_docs_test.py: C\.b.*`python scripts/gen_config_docs.py`"):
        gen.render()


def test_check_mode_reports_a_stale_file_and_how_to_fix_it(gen, tmp_path, monkeypatch, capsys):
    stale = tmp_path / "training.md"
    stale.write_text(f"x\n{gen.START}\nold\n{gen.END}\n")
    monkeypatch.setattr(gen, "DOC", stale)
    assert gen.main(["--check"]) == 1
    assert "run `python scripts/gen_config_docs.py`" in capsys.readouterr().err
    assert stale.read_text() == f"x\n{gen.START}\nold\n{gen.END}\n"  # --check writes nothing
