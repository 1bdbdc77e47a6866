"""The converter's host-op nodes written in C (``_hostops.host_records``) are byte for byte the nodes
``_Converter._host_record`` writes, on every real trace: each shared PyTorch job (host + Kineto), param's host
traces, and the Kineto traces HTA's users hold (host ops built from Kineto)."""

from __future__ import annotations

from pathlib import Path

import pytest

from etkit.executor import SerialExecutor
from etkit.pytorch import convert
from etkit.pytorch.host import load_host_trace
from etkit.pytorch.job import convert_job
from etkit.pytorch.kineto import load_kineto
from etkit.pytorch.kineto_convert import link_kineto
from etkit.pytorch.link import link

from ..conftest import KINETO_TRACES, PYTORCH_JOBS, UPSTREAM

PARAM = UPSTREAM / "facebookresearch-param" / "et_replay" / "tests" / "inputs"
needs_kernel = pytest.mark.skipif(convert.HOST_KERNEL is None, reason="etkit's _hostops/_assemble are not built")


def _files(prefix: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(prefix.parent.iterdir())}


def _job_jobs() -> list[str]:
    return sorted(p.name for p in PYTORCH_JOBS.iterdir() if p.is_dir()) if PYTORCH_JOBS.is_dir() else []


@needs_kernel
@pytest.mark.parametrize("name", _job_jobs())
def test_shared_jobs_convert_alike_with_and_without_the_c_host_records(monkeypatch, tmp_path, name):
    with_c = convert_job(PYTORCH_JOBS / name, tmp_path / "c" / name, executor=SerialExecutor())
    monkeypatch.setattr(convert, "HOST_KERNEL", None)
    without = convert_job(PYTORCH_JOBS / name, tmp_path / "py" / name, executor=SerialExecutor())
    assert [r.to_json() | {"path": ""} for r in with_c.ranks] == [r.to_json() | {"path": ""} for r in without.ranks]
    assert _files(tmp_path / "c" / name) == _files(tmp_path / "py" / name)


def _bytes_both_ways(monkeypatch, make_linked) -> tuple[bytes, bytes, int]:  # noqa: ANN001 - a callable
    """(framed ET with the C host records, without, host nodes the C path wrote)."""
    written = 0
    kernel = convert.HOST_KERNEL

    def counting(ctx, items, k):  # noqa: ANN001, ANN202
        nonlocal written
        end = kernel.host_records(ctx, items, k)
        written += end - k
        return end

    class Counting:
        host_records = staticmethod(counting)

    monkeypatch.setattr(convert, "HOST_KERNEL", Counting)
    report_c, framed_c = convert.convert_linked_bytes(make_linked(), rank=0)
    monkeypatch.setattr(convert, "HOST_KERNEL", None)
    report_py, framed_py = convert.convert_linked_bytes(make_linked(), rank=0)
    assert report_c.to_json() == report_py.to_json()
    return framed_c, framed_py, written


@needs_kernel
@pytest.mark.parametrize("trace", ["1.0.3-chakra.0.0.4/resnet_1gpu_et.json.gz", "1.1.0-chakra.0.0.4/resnet_2gpu_et.json.gz",
                                   "linear_et.json.gz"])
def test_param_host_traces_convert_alike(monkeypatch, trace):
    path = PARAM / trace
    if not path.exists():
        pytest.skip(f"{path} is not in shared data")
    framed_c, framed_py, written = _bytes_both_ways(monkeypatch, lambda: link(load_host_trace(path), None))
    assert framed_c == framed_py
    assert written > len(load_host_trace(path).ops) // 2  # most nodes came from C


@needs_kernel
@pytest.mark.parametrize("name", sorted(KINETO_TRACES))
def test_kineto_traces_convert_alike(monkeypatch, name):
    path = KINETO_TRACES[name]
    if not path.exists():
        pytest.skip(f"{path} is not in shared data")
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
    total = 0
    for file in files:
        framed_c, framed_py, written = _bytes_both_ways(monkeypatch, lambda f=file: link_kineto(load_kineto(f, rank=0)))
        assert framed_c == framed_py, file
        total += written
    assert total > 0 or name == "hta-call-stack"  # (6 ops of 6 names: each one the first of its name)


@needs_kernel
def test_unusual_host_ops_convert_alike(monkeypatch):
    """Values the C run stops at or must encode as Python does: negative and over-64-bit rf_ids, seq_ids
    below -1, non-ASCII names, IO values and schemas, a tensor read on another thread than its writer's."""
    path = PARAM / "1.0.3-chakra.0.0.4/resnet_1gpu_et.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is not in shared data")

    def unusual():  # noqa: ANN202
        linked = link(load_host_trace(path), None)
        ops = linked.host.ops
        for n, op in enumerate(ops):
            if n % 7 == 1:
                op.rf_id = [-3, 1 << 63, (1 << 64) + 5, 0, (1 << 62)][n % 5]
            if n % 11 == 2:
                op.seq_id = [-7, -1, 0, 1 << 40][n % 4]
            if n % 13 == 3:
                op.name = op.name + "\u00e9"
            if n % 17 == 4:
                op.io = ("['\u00fc']", *op.io[1:])
            if n % 19 == 5:
                op.op_schema = "f(\u03b1)"
        linked.thread[::3] = 7  # other lanes: readers of tensors written on another thread
        return linked

    framed_c, framed_py, written = _bytes_both_ways(monkeypatch, unusual)
    assert framed_c == framed_py
    assert written > 1000
