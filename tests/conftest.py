"""Shared fixtures: where the real traces and upstream vectors live, and small trace builders."""

from __future__ import annotations

import os
from collections.abc import Callable
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


@pytest.fixture(scope="session")
def converted_job(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``converted_job(name)``: the prefix of shared PyTorch job ``name`` converted to Chakra ETs, once
    per test process on first use. Read-only: a test that changes the files converts its own copy."""
    from etkit.executor import SerialExecutor
    from etkit.pytorch.job import convert_job

    out = tmp_path_factory.mktemp("converted")
    done: dict[str, Path] = {}

    def prefix(name: str) -> Path:
        if name not in done:
            convert_job(PYTORCH_JOBS / name, out / name, executor=SerialExecutor())
            done[name] = out / name
        return done[name]
    return prefix
