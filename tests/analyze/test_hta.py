"""etkit's GPU analyses (etkit.analyze.gpu) against HTA 0.5.0 on every Kineto trace in shared data.

HTA runs once per session, in the reference environment (``make refenv``), on the same traces
(tests/analyze/hta_reference.py, every trace in one process, nanosecond rounding off: HTA's default rounds
event bounds inward to whole µs). etkit converts each trace (``etkit convert kineto``) and analyses the ETs.
Every figure agrees within 1 %, but for the documented definitions:

- HTA's kernel-type table truncates each piece of it to whole µs (``astype(int)``): compared with
  ``whole_us=True``, which does the same;
- HTA lists the ``nccl:*``/``gloo:*`` backend ranges as user annotations; etkit folds them into their
  collective's COMM node (the collective's time is the kernel's), so they are not annotations;
- HTA's ``get_frequent_cuda_kernel_sequences`` fails with numpy 2 (``np.unique(axis=0)`` of objects):
  etkit's is checked against the raw trace instead;
- on the CPU-only job HTA's GPU analyses find nothing to analyse, while etkit's whole-rank breakdown works.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import orjson
import pytest

from etkit.analyze import gpu
from etkit.analyze.context import prepare
from etkit.executor import SerialExecutor
from etkit.pytorch.kineto_convert import kineto_files

from ..conftest import KINETO_TRACES, REPO, made_once

pytestmark = [pytest.mark.shared_data, pytest.mark.reference]
GPU_TRACES = sorted(n for n in KINETO_TRACES if n != "hta-cpu-only")
#: Names HTA lists as user annotations that etkit folds into COMM nodes.
FOLDED = ("nccl:", "gloo:")


def _close(a: float, b: float, rel: float = 0.01, abs_: float = 1e-3) -> bool:
    return abs(a - b) <= rel * abs(b) + abs_


@pytest.fixture(scope="session")
def hta(tmp_path_factory, ref_python) -> dict[str, dict]:
    """HTA's figures of every trace: one reference-environment process for all of them, once per session
    (shared by the xdist workers: conftest.made_once)."""
    def run_hta(root: Path) -> None:
        dirs = {}
        for name in sorted(KINETO_TRACES):
            d = root / name
            d.mkdir()
            for k in kineto_files(KINETO_TRACES[name]):  # HTA reads every trace file of a folder: Kineto ones only
                (d / k.path.name).symlink_to(k.path)
            dirs[name] = str(d)
        done = subprocess.run([str(ref_python), str(REPO / "tests/analyze/hta_reference.py"), *dirs.values()],
                              capture_output=True, text=True, check=True,
                              env={**os.environ, "HTA_DISABLE_NS_ROUNDING": "1"})
        found = json.loads(done.stdout)["traces"]
        (root / "hta.json").write_text(json.dumps({name: found[d] for name, d in dirs.items()}))

    return json.loads((made_once(tmp_path_factory, "hta", run_hta) / "hta.json").read_text())


@pytest.fixture(scope="session")
def contexts(kineto_job) -> dict[str, object]:
    """etkit's analysis context of every converted trace."""
    return {name: prepare(kineto_job(name), executor=SerialExecutor()) for name in KINETO_TRACES}


@pytest.mark.parametrize("name", GPU_TRACES)
def test_gpu_figures_agree_with_hta(hta, contexts, name):
    h, ctx = hta[name], contexts[name]
    job = ctx.job
    assert set(h["errors"]) <= {"sequences"}, h["errors"]
    assert h["ranks"] == sorted(job.traces)
    for mine, ref in zip(gpu.temporal_breakdown(job, context=ctx).ranks, h["temporal"]):
        for what in ("idle", "compute", "non_compute", "kernel"):
            assert _close(getattr(mine, f"{what}_ns") / 1e3, ref[f"{what}_time(us)"]), (what, mine, ref)
    whole = gpu.kernel_breakdown(job, context=ctx, whole_us=True)
    for ref in h["kernel_types"]:
        assert _close(whole.by_type.get(ref["kernel_type"], 0) / 1e3, ref["sum"]), ref
    assert set(whole.by_type) == {ref["kernel_type"] for ref in h["kernel_types"]}
    kernels = {(k.rank, k.name): k for k in gpu.kernel_breakdown(job, context=ctx).kernels}
    assert set(kernels) == {(ref["rank"], ref["name"]) for ref in h["kernels"]}
    for ref in h["kernels"]:
        k = kernels[(ref["rank"], ref["name"])]
        for mine, theirs in (("sum_ns", "sum (us)"), ("max_ns", "max (us)"), ("min_ns", "min (us)"),
                             ("mean_ns", "mean (us)"), ("std_ns", "stddev")):
            assert _close(getattr(k, mine) / 1e3, ref[theirs]), (ref["name"], mine, getattr(k, mine), ref[theirs])
        assert k.kernel_type == ref["kernel_type"]
    overlap = gpu.comm_comp_overlap(job, context=ctx)
    for ref in h["overlap"]:
        if ref["comp_comm_overlap_pctg"] is not None:  # None: no communication kernels
            assert _close(100 * overlap[ref["rank"]], ref["comp_comm_overlap_pctg"], abs_=0.006), ref
    idle = {(r, s, c): t for r, s, c, t, _ in gpu.idle_time_breakdown(job, context=ctx).rows}
    assert set(idle) == {(ref["rank"], ref["stream"], ref["idle_category"]) for ref in h["idle"]}
    for ref in h["idle"]:
        assert _close(idle[(ref["rank"], ref["stream"], ref["idle_category"])] / 1e3, ref["idle_time"], abs_=0.006), ref
    launches = gpu.launch_stats(job, context=ctx)
    for rank, rows in h["launches"].items():
        for mine, what in ((launches.cpu_ns, "cpu_duration"), (launches.gpu_ns, "gpu_duration"),
                           (launches.delay_ns, "launch_delay")):
            theirs = np.sort([row[what] for row in rows])
            assert len(mine[int(rank)]) == len(theirs)
            assert np.allclose(np.sort(mine[int(rank)]) / 1e3, theirs, rtol=0, atol=1e-3), what
    annotations = {(a.rank, a.name): a for a in gpu.annotation_breakdown(job, context=ctx).rows}
    for ref in h["annotations"]:
        a = annotations.get((ref["rank"], ref["name"]))
        if a is None:
            assert ref["name"].startswith(FOLDED), ref["name"]
            continue
        assert a.count and _close(a.sum_ns / 1e3, ref["sum (us)"]) and _close(a.max_ns / 1e3, ref["max (us)"]), ref


def test_hta_finds_nothing_on_a_cpu_job_where_etkit_still_answers(hta, contexts):
    from etkit.analyze import breakdown

    assert hta["hta-cpu-only"]["errors"]  # HTA's GPU analyses cannot run on a CPU/gloo trace
    b = breakdown(contexts["hta-cpu-only"].job, context=contexts["hta-cpu-only"]).total
    assert b.span_ns > 0 and b.compute_ns + b.exposed_comm_ns + b.waiting_ns > 0


def _raw_events(path: Path) -> list[dict]:
    (k,) = kineto_files(path)
    raw = k.path.read_bytes()
    return [e for e in orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)["traceEvents"]
            if e.get("ph") == "X"]


def test_frequent_kernel_sequences_are_the_kernels_each_op_launched(contexts):
    """HTA's implementation fails on numpy 2; the oracle is the raw trace: for every shallowest
    ``aten::conv2d``, the GPU events (on a stream, as HTA takes them) whose launch lies inside it on its
    thread, in start order."""
    events = _raw_events(KINETO_TRACES["hta-alexnet"])
    ops = [e for e in events if e.get("cat") == "cpu_op" and "aten::conv2d" in e["name"]]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
               or (e.get("cat") == "cuda_sync" and e["args"].get("stream", -1) >= 0)]  # HTA: all on a stream

    def inside(op, e):
        return op["ts"] <= e["ts"] and e["ts"] + e["dur"] <= op["ts"] + op["dur"] and e["tid"] == op["tid"]

    roots = [op for op in ops if not any(o is not op and inside(o, op) for o in ops)]
    expected: dict[str, int] = {}
    for op in roots:
        mine = sorted((k for k in kernels if k["args"]["correlation"] in launches
                       and inside(op, launches[k["args"]["correlation"]])), key=lambda k: k["ts"])
        if len(mine) >= 3:
            key = "|".join([op["name"]] + [k["name"] for k in mine])
            expected[key] = expected.get(key, 0) + 1
    ctx = contexts["hta-alexnet"]
    found = gpu.frequent_kernel_sequences(ctx.job, "aten::conv2d", context=ctx, top_k=0)
    assert {s.pattern: s.count for s in found} == expected and expected
    assert all(s.gpu_ns > 0 and s.cpu_ns > 0 for s in found)
