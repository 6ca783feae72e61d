"""Fixtures of the repair-loop tests (helpers live in tests/agent/helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.loop.command_line import BASE_URL_ENV, MODEL_ENV


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture(autouse=True)
def no_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint the person running the tests configured must not leak into runs that name none."""
    monkeypatch.delenv(MODEL_ENV, raising=False)
    monkeypatch.delenv(BASE_URL_ENV, raising=False)
