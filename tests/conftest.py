"""Shared fixtures: isolation from the user's config and environment, fixture loaders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Never read the developer's config or talk to their Ollama by accident."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)


def load_json(relative: str) -> Any:
    """A JSON fixture under tests/fixtures/."""
    return json.loads((FIXTURES / relative).read_text(encoding="utf-8"))
