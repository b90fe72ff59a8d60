"""Fixtures of the reasoning plugin's tests: the process registry with this plugin loaded."""

import pytest


@pytest.fixture(scope="session")
def registry():
    """The process-wide registry (the plugin is installed, so its entry point is discovered)."""
    import pivotgym

    reg = pivotgym.get_registry()
    if "reasoning/basic-arithmetic-v0" not in reg.envs:
        pytest.fail(
            "pivotgym-reasoning is not installed: pip install --no-deps --no-build-isolation "
            "-e plugins/pivotgym-reasoning"
        )
    return reg
