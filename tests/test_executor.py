"""Choosing an executor by name (``--executor``, ``$ETKIT_EXECUTOR``) and what runs where; the cluster itself
is exercised in tests/cluster."""

from __future__ import annotations

import socket

import pytest

from etkit.cli.main import main
from etkit.errors import EtkitError, UsageError
from etkit.executor import (
    DaskExecutor,
    ProcessExecutor,
    SerialExecutor,
    check_executor_spec,
    executor_from_spec,
    in_client,
)


@pytest.mark.parametrize("spec, kind, workers", [
    ("serial", SerialExecutor, None), ("local", ProcessExecutor, 3), ("local:2", ProcessExecutor, 2),
    ("local:1", SerialExecutor, None),
])
def test_local_specs(spec, kind, workers) -> None:
    made = executor_from_spec(spec, workers=3)
    assert type(made) is kind
    if workers is not None:
        assert made.workers == workers
    assert not made.remote


def test_dask_specs_keep_the_address_and_connect_lazily() -> None:
    made = executor_from_spec("dask://10.1.2.3:8786", workers=4)  # nothing listens there: nothing is opened
    assert isinstance(made, DaskExecutor) and made.address == "tcp://10.1.2.3:8786" and made.remote
    assert executor_from_spec("tls://sched.example:8786").address == "tls://sched.example:8786"
    # work whose results are whole traces runs in this machine's pool of -j processes, not on the cluster
    local = in_client(made)
    assert isinstance(local, ProcessExecutor) and local.workers == 4
    serial = SerialExecutor()
    assert in_client(serial) is serial


@pytest.mark.parametrize("spec", ["dask", "dask://nohost", "dask://host:port", "local:0", "local:x", "mpi://a:1", ""])
def test_bad_specs_are_one_line_errors(spec) -> None:
    with pytest.raises(UsageError, match="executor"):
        check_executor_spec(spec)


def test_cli_refuses_a_bad_executor_in_the_option_and_the_environment(tmp_path, capsys, monkeypatch) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["info", str(tmp_path / "j"), "--executor", "dask://nohost"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "dask://nohost" in err and len(err.strip().splitlines()) == 1
    from etkit.generate.collective import write_collective

    write_collective(tmp_path / "j", "all_reduce", 1 << 10, 2, executor=SerialExecutor())
    monkeypatch.setenv("ETKIT_EXECUTOR", "cluster-please")
    assert main(["info", str(tmp_path / "j"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "$ETKIT_EXECUTOR" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("ETKIT_EXECUTOR", "serial")
    assert main(["info", str(tmp_path / "j"), "-q"]) == 0


def test_an_unreachable_scheduler_is_one_line() -> None:
    pytest.importorskip("distributed")
    with socket.socket() as s:  # a loopback port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EtkitError, match=f"tcp://127.0.0.1:{port}: no Dask scheduler answers there") as exc:
        DaskExecutor(f"dask://127.0.0.1:{port}", timeout=1).map(abs, [1, 2])
    assert "\n" not in str(exc.value)
