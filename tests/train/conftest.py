"""Fixtures for the trainer tests; puts this folder on ``sys.path`` for ``train_testlib``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from train_testlib import make_tiny_llama


@pytest.fixture()
def tiny_model():
    return make_tiny_llama()
