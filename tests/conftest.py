"""Shared fixtures: where the real traces and upstream vectors live, and small trace builders."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
UPSTREAM = SHARED_DATA / "upstream"
PYTORCH_JOBS = SHARED_DATA / "pytorch"
#: The real ASTRA-sim analytical simulator (both backends), prebuilt: the oracle for ``etkit simulate``.
ASTRA_SIM = REPO.parent / "shared" / "tools" / "astra-sim" / "astra-sim"
#: The reference tools' virtual environment (``make refenv``: mlc-chakra 1.0.0 and HTA 0.5.0).
REF_VENV = Path(os.environ.get("ETKIT_REF_VENV") or REPO / ".venv-ref")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    required = bool(os.environ.get("ETKIT_REQUIRE_SHARED_DATA"))
    missing = []
    if not SHARED_DATA.is_dir():
        missing.append(("shared_data", SHARED_DATA))
    if not (REF_VENV / "bin" / "python").exists():
        missing.append(("reference", REF_VENV))
    if missing and required:
        raise pytest.UsageError(f"{missing[0][1]} is missing but ETKIT_REQUIRE_SHARED_DATA is set")
    for marker, path in missing:
        skip = pytest.mark.skip(reason=f"needs {path}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def astra_sim() -> Path:
    """The ASTRA-sim binary (tests using it are marked ``shared_data``)."""
    return ASTRA_SIM


@pytest.fixture(scope="session")
def ref_python() -> Path:
    """The reference environment's interpreter (tests using it are marked ``reference``)."""
    return REF_VENV / "bin" / "python"


@pytest.fixture(scope="session")
def ref_bin() -> Path:
    """The reference environment's ``bin`` folder (``chakra_jsonizer``, ``chakra_converter``, ...)."""
    return REF_VENV / "bin"


@pytest.fixture(scope="session")
def upstream() -> Path:
    return UPSTREAM


@pytest.fixture(scope="session")
def pytorch_jobs() -> Path:
    return PYTORCH_JOBS


def made_once(tmp_path_factory: pytest.TempPathFactory, key: str, make: Callable[[Path], object]) -> Path:
    """The folder ``key`` filled by ``make(folder)`` once per test session, shared by the session's xdist
    workers: the first to need it makes it (holding a file lock), the others wait and read it. Read-only for
    its users. A ``make`` that fails leaves nothing behind: the next user makes it again (and fails too)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's own
    root = root / "made-once"
    root.mkdir(exist_ok=True)
    folder = root / key
    with (root / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".done").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                make(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            (folder / ".done").touch()
    return folder


@pytest.fixture(scope="session")
def converted_job(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``converted_job(name)``: the prefix of shared PyTorch job ``name`` converted to Chakra ETs, once
    per test session on first use (:func:`made_once`). Read-only: a test that changes the files converts its
    own copy."""
    from etkit.executor import SerialExecutor
    from etkit.pytorch.job import convert_job

    def prefix(name: str) -> Path:
        folder = made_once(tmp_path_factory, f"converted-{name}",
                           lambda out: convert_job(PYTORCH_JOBS / name, out / name, executor=SerialExecutor()))
        return folder / name
    return prefix


#: The Kineto traces in shared data that HTA's users hold (GPU unless noted), by a short name: what
#: ``etkit convert kineto`` and the HTA comparisons run on.
KINETO_TRACES = {
    "param-linear": UPSTREAM / "facebookresearch-param/et_replay/tests/inputs/linear_kineto.json.gz",
    "hta-alexnet": UPSTREAM / "hta/tests/data/critical_path/alexnet",
    "hta-simple-add": UPSTREAM / "hta/tests/data/critical_path/simple_add",
    "hta-event-sync": UPSTREAM / "hta/tests/data/critical_path/cuda_event_sync",
    "hta-event-sync-streams": UPSTREAM / "hta/tests/data/critical_path/cuda_event_sync_multi_stream",
    "hta-nccl": UPSTREAM / "hta/tests/data/nccl_parser_config",
    "hta-diff-test": UPSTREAM / "hta/tests/data/trace_diff/test",
    "hta-diff-control": UPSTREAM / "hta/tests/data/trace_diff/control",
    "hta-compare-base": UPSTREAM / "hta/tests/data/trace_compare/base",
    "hta-compare-test": UPSTREAM / "hta/tests/data/trace_compare/test",
    "hta-call-stack": UPSTREAM / "hta/tests/data/call_stack",
    "hta-et-trace": UPSTREAM / "hta/tests/data/execution_trace/benchmark_simple_add_trace.json.gz",
    "hta-amd": UPSTREAM / "hta/tests/data/amd_trace",
    "hta-cpu-only": UPSTREAM / "hta/tests/data/cpu_only",  # a CPU (gloo) job
}


@pytest.fixture(scope="session")
def kineto_converted(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``kineto_converted(name)``: the prefix of :data:`KINETO_TRACES` ``name`` converted by ``etkit convert
    kineto``, once per test session on first use (:func:`made_once`; read-only)."""
    from etkit.executor import SerialExecutor
    from etkit.pytorch.kineto_convert import convert_kineto

    def prefix(name: str) -> Path:
        folder = made_once(tmp_path_factory, f"kineto-{name}",
                           lambda out: convert_kineto(KINETO_TRACES[name], out / name, executor=SerialExecutor()))
        return folder / name
    return prefix


@pytest.fixture(scope="session")
def kineto_job(kineto_converted):  # type: ignore[no-untyped-def]
    """``kineto_job(name)``: the :class:`etkit.model.job.Job` of ``kineto_converted(name)``. A trace of some
    ranks of a bigger job has a comm-groups file naming the others, so the ranks are loaded as they are."""
    from etkit.model.groups import ProcessGroups
    from etkit.model.job import Job
    from etkit.model.trace import load_trace

    def job(name: str):  # type: ignore[no-untyped-def]
        prefix = kineto_converted(name)
        traces = {int(f.name.split(".")[-2]): load_trace(f) for f in sorted(prefix.parent.glob(prefix.name + ".*.et"))}
        groups = prefix.parent / f"{prefix.name}.comm_groups.json"
        return Job(traces, ProcessGroups.load(groups) if groups.exists() else ProcessGroups(), str(prefix))
    return job
