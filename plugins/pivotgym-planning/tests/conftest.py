"""Fixtures of the planning plugin's tests: the process registry with this plugin loaded."""

import pytest


@pytest.fixture(scope="session")
def registry():
    """The process-wide registry (the plugin is installed, so its entry point is discovered)."""
    import pivotgym

    reg = pivotgym.get_registry()
    if "planning/blocks-v0" not in reg.envs:
        pytest.fail(
            "pivotgym-planning is not installed: pip install --no-deps --no-build-isolation "
            "-e plugins/pivotgym-planning"
        )
    return reg
