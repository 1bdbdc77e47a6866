"""The Kineto reader's typed fast path (msgspec records, no dict per event) gives exactly the columns of the dict path.

Every chunk of events either comes out of ``_Columns.typed_chunk`` or, when it returns None, out of the orjson
dict path; these tests compare the two on real traces and on the corners where they could differ, and check
that a fault still gets the dict path's error.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from etkit.pytorch import kineto
from etkit.pytorch.kineto import KinetoTraceError, load_kineto
from etkit.pytorch.kineto_convert import kineto_files

from ..conftest import KINETO_TRACES, PYTORCH_JOBS


def _fields(trace: kineto.KinetoTrace) -> dict:
    """Every column of ``trace`` as comparable values (arrays with their dtype and bytes)."""
    return {f.name: ((v.dtype.str, v.tobytes()) if isinstance(v, np.ndarray) else repr(v))
            for f in dataclasses.fields(trace) if f.name != "cache" for v in [getattr(trace, f.name)]}


def _both(path, monkeypatch) -> tuple[dict, dict, list[bool]]:  # noqa: ANN001
    """(columns read with the typed path, columns read by the dict path alone, which chunks were typed)."""
    typed = kineto._Columns.typed_chunk
    taken: list[bool] = []

    def watched(self, text):  # type: ignore[no-untyped-def]
        out = typed(self, text)
        taken.append(out is not None)
        return out
    monkeypatch.setattr(kineto._Columns, "typed_chunk", watched)
    fast = _fields(load_kineto(path))
    monkeypatch.setattr(kineto._Columns, "typed_chunk", lambda self, text: None)
    return fast, _fields(load_kineto(path)), taken


@pytest.mark.shared_data
@pytest.mark.parametrize("path", [k.path for name in ("hta-nccl", "hta-amd", "hta-event-sync-streams", "hta-cpu-only")
                                  for k in kineto_files(KINETO_TRACES[name])]
                         + [PYTORCH_JOBS / "hybrid_dp_tp_ws4" / "rank-1.kineto.json.gz"], ids=lambda p: p.name)
def test_real_traces_read_the_same_both_ways(path, monkeypatch):
    fast, plain, taken = _both(path, monkeypatch)
    assert fast == plain
    assert any(taken)


def _event(**fields) -> dict:
    base = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 11, "tid": 12, "ts": 1700000000000000.25,
            "dur": 3.5, "args": {"External id": 5, "Record function id": 6, "Input Dims": [[2, 3]]}}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not _ABSENT}


_ABSENT = object()
_KERNEL = {"cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7,
           "args": {"stream": 7, "correlation": 40, "External id": 5, "grid": [1, 2, 3]}}
CORNERS = {
    "host ops of both kinds, ts written as an integer": [_event(), _event(cat="user_annotation", ts=17, name="step#1")],
    "host op without args, tid, pid, ts or dur": [_event(args=_ABSENT, tid=_ABSENT, pid=_ABSENT, ts=_ABSENT, dur=_ABSENT)],
    "host op with null args, empty name": [_event(args=None, name="")],
    "host op not complete (skipped)": [_event(ph="B", tid="anything")],
    "communication host ops keep their args": [
        _event(name="record_param_comms", args={"Collective name": "allreduce", "In msg nelems": 8, "dtype": "Float",
                                                "Process Group Name": 0, "Process Group Ranks": [0, 1], "x": 1}),
        _event(name="c10d::send", args={"Input Dims": [[4]], "Input type": ["float"], "Concrete Inputs": ["", "1"]}),
        _event(name="nccl:all_reduce", args=None)],
    "GPU activity": [{**_KERNEL}, {**_KERNEL, "cat": "gpu_memcpy", "args": {"stream": 7, "bytes": 64}},
                     {**_KERNEL, "cat": "gpu_memset", "args": {"stream": 8}}],
    "an NCCL kernel keeps its args": [{**_KERNEL, "name": "ncclKernel", "args": {
        "stream": 9, "correlation": 41, "Collective name": "allreduce", "Process Group Name": 3, "Group size": 2}},
        {**_KERNEL, "args": {"stream": 9, "Process Group Name": None}}],
    "a kernel's bytes (not read)": [{**_KERNEL, "args": {"stream": 7, "bytes": "many"}}],
    "a GPU event without a stream (its tid)": [{**_KERNEL, "tid": "stream 7", "args": {"correlation": 3}}],
    "new names, then an event for the dict path": [_event(name="first"), {**_KERNEL, "name": "second"},
                                                   {**_KERNEL, "name": "third", "args": {"correlation": 3}}],
    "runtime and driver calls": [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 12,
                                  "ts": 2.5, "dur": 1, "args": {"correlation": 40, "External id": 5}},
                                 {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "tid": 12, "ts": 3}],
    "stream ranges and syncs": [
        {"ph": "X", "cat": "gpu_user_annotation", "name": "nccl:x", "tid": 7, "ts": 1, "dur": 2, "args": {"stream": 7}},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "tid": 7, "ts": 1, "dur": 0,
         "args": {"stream": 7, "wait_on_stream": 8, "wait_on_cuda_event_record_corr_id": 30, "correlation": 31}},
        {"ph": "X", "cat": "cuda_sync", "name": "Event Sync", "tid": 7, "ts": 1, "args": {"stream": -1}}],
    "thread names, twice": [{"ph": "M", "name": "thread_name", "pid": 11, "tid": 12, "args": {"name": "main"}},
                            {"ph": "M", "name": "thread_name", "tid": 12, "args": {"name": "pt_gloo_runloop"}},
                            {"ph": "M", "name": "thread_name", "tid": "x", "args": {"name": 5}},
                            {"ph": "M", "name": "thread_name", "tid": 13}],
    "other events, of any shape": [{"ph": "X", "cat": "Trace", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 1},
                                   {"ph": "f", "cat": "ac2g", "id": 4, "bp": "e"}, {"name": 5, "cat": None},
                                   {"ph": "i", "s": "g", "ts": "soon"}],
    "ids written as floats and strings": [_event(tid=12.0), _event(args={"External id": "5"}),
                                          {**_KERNEL, "args": {"stream": 7.0}}],
    "ids at the 64-bit edges": [_event(tid=-(2 ** 63 - 1), pid=2 ** 63 - 1)],
    "times beyond 2**53 us (exact only as written)": [_event(ts=2 ** 53 + 1), _event(ts=9e15)],
    "non-ASCII names": [_event(name="aten::ä"), {**_KERNEL, "name": "k\u00e9"}],
    "duplicate keys": [_event()],  # written with a second "tid" below
}
FAULTS = {
    "event not an object": [1],
    "cat a number": [_event(cat=5)],
    "name null": [_event(name=None)],
    "tid a word": [_event(tid="main")],
    "dur negative": [_event(dur=-1)],
    "args a list": [_event(args=[1])],
    "id beyond 64 bits": [_event(pid=2 ** 63)],
    "stream a float": [{**_KERNEL, "args": {"stream": 1.5}}],
    "ts of ns beyond 64 bits": [{**_KERNEL, "ts": 1e17}],
}


def _write(tmp_path, events: list) -> str:  # noqa: ANN001
    text = json.dumps({"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 7}, indent=1)
    path = tmp_path / "t.json"
    path.write_text(text.replace('"tid": 12,', '"tid": 99, "tid": 12,'), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("case", sorted(CORNERS))
def test_typed_path_gives_the_dict_paths_columns(tmp_path, monkeypatch, case):
    fast, plain, _ = _both(_write(tmp_path, CORNERS[case] * 40), monkeypatch)  # (several chunks)
    assert fast == plain


def test_typed_path_takes_the_common_events():
    events = [e for case in ("host ops of both kinds, ts written as an integer", "GPU activity", "runtime and driver calls",
                             "communication host ops keep their args", "stream ranges and syncs", "thread names, twice",
                             "other events, of any shape") for e in CORNERS[case][:3]]
    events = [e for e in events if e.get("ts") != "soon" and e.get("name") != 5]
    assert kineto._Columns().typed_chunk(json.dumps(events).encode()) is not None


@pytest.mark.parametrize("case", sorted(FAULTS))
def test_a_fault_gets_the_dict_paths_error(tmp_path, case):
    assert kineto._Columns().typed_chunk(json.dumps(FAULTS[case]).encode()) is None  # left to the dict path ...
    with pytest.raises(KinetoTraceError, match=r"t\.json: traceEvents\[0\]"):  # ... which says what is wrong
        load_kineto(_write(tmp_path, FAULTS[case]))
