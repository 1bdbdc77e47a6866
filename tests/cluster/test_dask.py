"""The Dask executor against a real scheduler and two real worker processes on loopback.

One cluster per module (``LocalCluster(processes=True)``: a scheduler and two nanny-managed worker
processes, one thread each). Every result is compared with the in-process executor's on the same input:
ETs byte for byte, reports value for value. One test kills a worker process in the middle of a run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

from etkit.analyze import analyze_job  # noqa: E402
from etkit.analyze.summary import info  # noqa: E402
from etkit.cli.main import main  # noqa: E402
from etkit.errors import EtkitError  # noqa: E402
from etkit.executor import DaskExecutor, SerialExecutor, executor_from_spec  # noqa: E402
from etkit.generate.llm import write_llm  # noqa: E402
from etkit.model.job import load_job  # noqa: E402
from etkit.simulate import load_config, prepare  # noqa: E402
from etkit.simulate.config import Knobs  # noqa: E402
from etkit.simulate.whatif import sweep  # noqa: E402
from etkit.validate import validate  # noqa: E402

pytestmark = pytest.mark.cluster
SERIAL = SerialExecutor()


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.CRITICAL) as c:
        yield c


@pytest.fixture(scope="module")
def dask(cluster):
    with DaskExecutor(cluster.scheduler_address) as ex:
        yield ex


@pytest.fixture(scope="module")
def job64(tmp_path_factory) -> Path:
    """A 64-rank LLM layout (llama3-8b, dp4 tp4 pp4), written once."""
    prefix = tmp_path_factory.mktemp("job64") / "llm"
    write_llm(prefix, model="llama3-8b", dp=4, tp=4, pp=4, executor=SERIAL)
    return prefix


def _files(prefix: Path) -> dict[str, bytes]:
    return {p.name[len(prefix.name):]: p.read_bytes() for p in sorted(prefix.parent.glob(prefix.name + ".*"))}


@pytest.mark.shared_data
def test_convert_on_the_cluster_writes_the_same_bytes(dask, pytorch_jobs, tmp_path) -> None:
    from etkit.pytorch.job import convert_job

    local = convert_job(pytorch_jobs / "tp_transformer_ws4", tmp_path / "local" / "tp", executor=SERIAL)
    remote = convert_job(pytorch_jobs / "tp_transformer_ws4", tmp_path / "dask" / "tp", executor=dask)
    a, b = _files(tmp_path / "local" / "tp"), _files(tmp_path / "dask" / "tp")
    assert sorted(a) == [".0.et", ".1.et", ".2.et", ".3.et", ".comm_groups.json"]
    assert a == b
    assert [r.nodes for r in local.ranks] == [r.nodes for r in remote.ranks]


def test_validate_info_and_analyze_match_the_local_executor(dask, job64) -> None:
    assert validate(job64, executor=dask).to_json() == validate(job64, executor=SERIAL).to_json()
    assert info(job64, executor=dask) == info(job64, executor=SERIAL)
    # the analysis needs every trace here: under a cluster executor the job is read in this process's pool
    remote, local = load_job(job64, executor=dask), load_job(job64, executor=SERIAL)
    assert analyze_job(remote).to_json() == analyze_job(local).to_json()


def test_six_point_sweep_matches_and_each_worker_reads_the_job_once(dask, job64) -> None:
    network, system, device = load_config(preset="hgx-h100")
    knobs = Knobs(trace_device=device)
    axes = [("bandwidth1", ("25", "50", "100")), ("scale-compute", ("1", "0.5"))]
    prepared = prepare(job64, executor=SERIAL)
    here = sweep(prepared, network, system, knobs, axes, executor=SERIAL)
    there = sweep(job64, network, system, knobs, axes, executor=dask)
    assert len(there.points) == 6
    assert there.to_json() == here.to_json()
    makespans = {p.settings: p.makespan_ns for p in there.points}
    assert makespans[(("bandwidth1", "25"), ("scale-compute", "1"))] > makespans[(("bandwidth1", "100"), ("scale-compute", "1"))]
    # every worker that ran a point holds the job: it read each class leader once (at most the leaders the
    # whole sweep needed here), and a second sweep of the same job reads nothing new
    first = {w: h for w, h in dask.client.run(_held_job).items() if h is not None}
    assert first
    for identity, kept, _ in first.values():
        assert identity == prepared.identity and 0 < kept <= len(prepared._kept)
    sweep(job64, network, system, knobs, [("latency1", ("1000", "3000"))], executor=dask)
    second = dask.client.run(_held_job)
    assert all(second[w][2] == h[2] for w, h in first.items())  # the same held object, not read again


def _held_job() -> tuple[tuple, int, int] | None:
    from etkit.simulate import whatif

    if not whatif._HELD:
        return None
    return whatif._HELD[0].identity, len(whatif._HELD[0]._kept), id(whatif._HELD[0])


def test_a_corrupt_rank_fails_with_the_local_one_line_error(dask, job64, tmp_path, capsys) -> None:
    bad = tmp_path / "bad"
    for rank in range(4):
        data = Path(f"{job64}.{rank}.et").read_bytes()
        Path(f"{bad}.{rank}.et").write_bytes(data[: len(data) // 2] if rank == 2 else data)
    with pytest.raises(EtkitError) as local:
        validate(bad, executor=SERIAL)
    with pytest.raises(EtkitError) as remote:
        validate(bad, executor=dask)
    assert type(remote.value) is type(local.value)
    assert str(remote.value) == str(local.value)
    assert f"{bad}.2.et" in str(local.value)
    assert main(["validate", str(bad), "-q", "--executor", "serial"]) == 2
    local_err = capsys.readouterr().err
    address = dask.address.replace("tcp://", "dask://")
    assert main(["validate", str(bad), "-q", "--executor", address]) == 2
    remote_err = capsys.readouterr().err
    assert remote_err == local_err and len(local_err.strip().splitlines()) == 1


def test_cli_executor_option_and_environment(dask, job64, tmp_path, capsys, monkeypatch) -> None:
    address = dask.address.replace("tcp://", "dask://")
    assert main(["info", str(job64), "-q", "--executor", "serial", "--json", str(tmp_path / "a.json")]) == 0
    assert main(["info", str(job64), "-q", "--executor", address, "--json", str(tmp_path / "b.json")]) == 0
    monkeypatch.setenv("ETKIT_EXECUTOR", address)
    assert main(["info", str(job64), "-q", "--json", str(tmp_path / "c.json")]) == 0
    capsys.readouterr()
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes() == (tmp_path / "c.json").read_bytes()
    assert isinstance(executor_from_spec(address), DaskExecutor)


@contextlib.contextmanager
def _tracks_tasks(dask) -> Iterator[list[str]]:
    """The keys of the cluster tasks that computed rank views in the ``with`` block (filled at its end)."""
    keys: list[str] = []
    with distributed.get_task_stream(client=dask.client) as stream:
        yield keys
    keys.extend(str(t["key"]) for t in stream.data if "etkit-tracks" in str(t["key"]))


def _view_columns(ctx) -> dict:
    return {r: (v.kinds.tolist(), v.transfer.tolist(), v.tracks.track.tolist(), v.tracks.names, v.tracks.leaf.tolist(),
                v.tracks.seg_start.tolist(), v.tracks.seg_end.tolist(), v.tracks.seg_row.tolist(),
                None if v.tracks.parent is None else v.tracks.parent.tolist()) for r, v in ctx.views.items()}


@pytest.mark.shared_data
def test_analyses_run_their_per_rank_work_on_the_cluster(dask, job64, converted_job, tmp_path) -> None:
    from etkit.analyze.context import prepare as prepare_analysis

    # a generated job (times from durations) and a profiled one (trace timestamps, calls nested on threads)
    for prefix in (job64, converted_job("tp_transformer_ws2")):
        job = load_job(prefix, executor=SERIAL)
        with _tracks_tasks(dask) as keys:
            ctx, analysis = prepare_analysis(job, executor=dask), analyze_job(job, executor=dask)
        assert keys, "no rank view was computed on the cluster"
        local = prepare_analysis(job, executor=SERIAL)
        assert _view_columns(ctx) == _view_columns(local)
        assert analysis.to_json() == analyze_job(job, executor=SERIAL).to_json()
    # a rank file that changed after the job was loaded is named, not analysed as another trace
    copy = tmp_path / "copy"
    for rank in range(2):
        Path(f"{copy}.{rank}.et").write_bytes(Path(f"{converted_job('tp_transformer_ws2')}.{rank}.et").read_bytes())
    job = load_job(copy, executor=SERIAL)
    Path(f"{copy}.1.et").write_bytes(Path(f"{job64}.1.et").read_bytes())
    with pytest.raises(EtkitError, match=r"copy\.1\.et: rank 1's file changed after it was loaded"):
        analyze_job(job, executor=dask)


@pytest.mark.shared_data
def test_a_kineto_trace_is_converted_in_the_client_under_a_cluster_executor(dask) -> None:
    """Converted on the fly into this machine's temporary folder, which a cluster's workers cannot reach: the
    conversion runs in the client's pool, the analysis is the serial one."""
    from etkit.pytorch.kineto_convert import load_kineto_job

    from ..conftest import KINETO_TRACES

    trace = KINETO_TRACES["hta-event-sync-streams"]
    with distributed.get_task_stream(client=dask.client) as stream:
        job = load_kineto_job(trace, executor=dask)
    assert not [t for t in stream.data if "etkit-" in str(t["key"])]
    local = load_kineto_job(trace, executor=SERIAL)
    assert analyze_job(job).to_json() == analyze_job(local).to_json()


@pytest.mark.shared_data
def test_analysis_verbs_give_the_same_outputs_on_the_cluster(dask, converted_job, tmp_path, capsys) -> None:
    prefix = str(converted_job("tp_transformer_ws2"))
    address = dask.address.replace("tcp://", "dask://")
    outputs = {}
    for name, where in (("serial", "serial"), ("dask", address)):
        out = tmp_path / name
        out.mkdir()
        with _tracks_tasks(dask) as keys:
            codes = [main(["analyze", prefix, "-q", "--executor", where, "--json", str(out / "a.json")]),
                     main(["timeline", prefix, "-q", "--executor", where, "-o", str(out / "t.json")]),
                     main(["report", prefix, "-q", "--executor", where, "-o", str(out / "r.html")]),
                     main(["diff", prefix, prefix, "-q", "--executor", where, "--json", str(out / "d.json")])]
        assert codes == [0, 0, 0, 0]
        assert bool(keys) == (where == address)
        outputs[name] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    capsys.readouterr()
    assert sorted(outputs["dask"]) == ["a.json", "d.json", "r.html", "t.json"]
    assert outputs["dask"] == outputs["serial"]


def test_a_worker_killed_mid_run_has_its_tasks_rerun(cluster, dask, job64) -> None:
    """The last test of the module: it kills a worker process (the nanny starts a new one)."""
    expected = validate(job64, executor=SERIAL).to_json()
    client = dask.client
    pids = client.run(os.getpid)
    done: dict[str, object] = {}

    def run() -> None:
        try:
            done["report"] = validate(job64, executor=dask).to_json()
        except BaseException as exc:  # noqa: BLE001 (reported by the assertion below)
            done["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    killed = None
    deadline = time.monotonic() + 30
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        busy = [w for w, keys in client.processing().items() if any("etkit-validate" in str(k) for k in keys)]
        if busy:
            os.kill(pids[busy[0]], signal.SIGKILL)
            killed = busy[0]
        time.sleep(0.002)
    thread.join(300)  # a bound for a hang only: a loaded 2-core machine can take minutes to re-run the work
    assert killed is not None, "the run ended before a worker could be killed"
    assert "error" not in done, done.get("error")
    assert done["report"] == expected
    client.wait_for_workers(2, timeout=120)  # the nanny restarts the killed worker (slow under load)
    assert set(client.run(os.getpid).values()) != set(pids.values())  # a worker process was replaced
