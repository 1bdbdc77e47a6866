"""Every GPU kernel, copy and set of the Kineto window is in the converted ET, with its measured time.

Checked on the real GPU traces with a host execution trace (param's ``linear`` job, HTA's ``execution_trace``
pair) against the raw Kineto JSON read here independently: the window is the time the host trace's ops
cover in Kineto; every GPU event launched in it (or, without a launch, running in it) is a node on its
stream, with its Kineto start and duration to the nanosecond; copies and sets are memory nodes; the
report's Kineto and ET GPU times are equal; each activity depends on the one before it on its stream.
"""

from __future__ import annotations

import gzip
from decimal import Decimal

import numpy as np
import orjson
import pytest

from etkit.format.attrs import PROFILER_CATEGORIES
from etkit.format.schema import NodeType
from etkit.model.trace import MISSING, load_trace
from etkit.pytorch.job import convert_files

from ..conftest import UPSTREAM
from .raw import stream_order_breaks

pytestmark = pytest.mark.shared_data
PARAM = UPSTREAM / "facebookresearch-param" / "et_replay" / "tests" / "inputs"
HTA = UPSTREAM / "hta" / "tests" / "data"
PAIRS = {"param-linear": (PARAM / "linear_et.json.gz", PARAM / "linear_kineto.json.gz"),
         "hta-simple-add": (HTA / "execution_trace" / "benchmark_simple_add_et.json.gz",
                            HTA / "execution_trace" / "benchmark_simple_add_trace.json.gz")}
GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def _ns(value) -> int:
    """Exact ns of a JSON µs value: the digits as written (a float's repr is the shortest text that reads back
    as it), in decimal arithmetic, so the oracle does no float rounding of its own."""
    return int(Decimal(repr(value)) * 1000)


def _raw(path):
    return orjson.loads(gzip.decompress(path.read_bytes()))


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_every_gpu_event_of_the_window_is_in_the_et(tmp_path, name):
    host, kineto = PAIRS[name]
    report = convert_files(host, tmp_path / "out", kineto=kineto).ranks[0]
    trace = load_trace(report.path)
    doc = _raw(kineto)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    # the window: what the host trace's ops cover in Kineto (their ET times are Kineto's, in Unix ns)
    host_rows = (trace.is_cpu_op == 1) & (trace.ts_ns != MISSING) & (trace.cat != PROFILER_CATEGORIES.index("cuda_runtime"))
    lo, hi = int(trace.ts_ns[host_rows].min()), int((trace.ts_ns + trace.dur_ns)[host_rows].max())
    launch = {e["args"]["correlation"]: base + _ns(e["ts"]) for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    wanted = []
    for e in events:  # kernels, copies, sets, and the syncs Kineto puts on a stream
        if e.get("cat") not in GPU and not (e.get("cat") == "cuda_sync" and e["args"].get("stream", -1) >= 0):
            continue
        start, dur = base + _ns(e["ts"]), _ns(e["dur"])
        t = launch.get(e["args"].get("correlation"))
        if (lo <= t <= hi) if t is not None else (start < hi and start + dur > lo):
            wanted.append((e["name"], e["args"]["stream"], start, dur, e["cat"]))
    assert wanted, name
    on_stream = np.flatnonzero(trace.stream != MISSING)
    got = sorted((trace.name(r), int(trace.stream[r]), int(trace.ts_ns[r]), int(trace.dur_ns[r])) for r in on_stream)
    assert got == sorted(w[:4] for w in wanted)
    memory = {int(NodeType.MEM_LOAD_NODE), int(NodeType.MEM_STORE_NODE)}
    kinds = {(trace.name(r), int(trace.ts_ns[r])): int(trace.types[r]) for r in on_stream}
    for e_name, _, start, _, cat in wanted:
        assert (kinds[(e_name, start)] in memory) == (cat in ("gpu_memcpy", "gpu_memset")), (e_name, cat)
    total = sum(w[3] for w in wanted)
    assert report.gpu_time_kineto_ns == report.gpu_time_et_ns == total
    gpu = [w for w in wanted if w[4] in GPU]
    assert report.gpu_events == len(wanted) and report.link["kernels_outside"] + len(gpu) == \
        sum(1 for e in events if e.get("cat") in GPU)
    assert report.runtime_ops > 0  # CUDA runtime calls kept for launch statistics
    # stream order: every activity depends on the one before it on its stream
    pairs, breaks = stream_order_breaks(trace)
    assert pairs >= len(wanted) - len({w[1] for w in wanted}) and breaks == []
