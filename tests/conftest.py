"""Shared fixtures: where the real traces and upstream vectors live, and small trace builders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
UPSTREAM = SHARED_DATA / "upstream"
PYTORCH_JOBS = SHARED_DATA / "pytorch"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if SHARED_DATA.is_dir():
        return
    if os.environ.get("ETKIT_REQUIRE_SHARED_DATA"):
        raise pytest.UsageError(f"{SHARED_DATA} is missing but ETKIT_REQUIRE_SHARED_DATA is set")
    skip = pytest.mark.skip(reason=f"needs {SHARED_DATA}")
    for item in items:
        if "shared_data" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def upstream() -> Path:
    return UPSTREAM


@pytest.fixture(scope="session")
def pytorch_jobs() -> Path:
    return PYTORCH_JOBS
