"""The Kineto reader's fast paths give exactly the columns of the dict path: the C kernel (``etkit.pytorch._kineto``,
the whole array of events in one pass) and the typed path (msgspec records, no dict per event).

The kernel reads a trace's events or declines them all; then every chunk of events either comes out of
``_Columns.typed_chunk`` or, when it returns None, out of the orjson dict path. These tests compare the three
on real traces and on the corners where they could differ, and check that a fault still gets the dict path's
error.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from etkit.errors import EtkitError
from etkit.pytorch import kineto
from etkit.pytorch.kineto import KinetoTraceError, load_kineto
from etkit.pytorch.kineto_convert import kineto_files

from ..conftest import KINETO_TRACES, PYTORCH_JOBS


def _fields(trace: kineto.KinetoTrace) -> dict:
    """Every column of ``trace`` as comparable values (arrays with their dtype and bytes)."""
    return {f.name: ((v.dtype.str, v.tobytes()) if isinstance(v, np.ndarray) else repr(v))
            for f in dataclasses.fields(trace) if f.name != "cache" for v in [getattr(trace, f.name)]}


def _both(path, monkeypatch) -> tuple[dict, dict, list[bool]]:  # noqa: ANN001
    """(columns read with the typed path, columns read by the dict path alone, which chunks were typed), the
    kernel left out."""
    monkeypatch.setattr(kineto, "KERNEL", None)
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


# -- the C kernel ----------------------------------------------------------------------------------------------
needs_kernel = pytest.mark.skipif(kineto.KERNEL is None, reason="etkit.pytorch._kineto is not built")


def _kernel_and_dict(path, monkeypatch) -> tuple[dict, dict, bool]:  # noqa: ANN001
    """(columns read with the kernel, columns read by the dict path alone, whether the kernel took them)."""
    kernel_trace = kineto._kernel_trace
    took: list[bool] = []

    def watched(*args):  # type: ignore[no-untyped-def]
        out = kernel_trace(*args)
        took.append(out is not None)
        return out
    monkeypatch.setattr(kineto, "_kernel_trace", watched)
    fast = _fields(load_kineto(path))
    monkeypatch.setattr(kineto, "KERNEL", None)
    monkeypatch.setattr(kineto._Columns, "typed_chunk", lambda self, text: None)
    return fast, _fields(load_kineto(path)), took == [True]


@needs_kernel
@pytest.mark.shared_data
@pytest.mark.parametrize("path", [k.path for spec in KINETO_TRACES.values() for k in kineto_files(spec)]
                         + [PYTORCH_JOBS / "hybrid_dp_tp_ws4" / "rank-1.kineto.json.gz"], ids=lambda p: p.name)
def test_the_kernel_reads_every_real_trace_as_the_dict_path(path, monkeypatch):
    fast, plain, took = _kernel_and_dict(path, monkeypatch)
    assert took  # (every real trace we have is one the kernel takes whole)
    assert fast == plain


KERNEL_CORNERS = {
    "a stream range and a kernel without a stream arg (on their tid)": [
        {"ph": "X", "cat": "gpu_user_annotation", "name": "## backward ##", "tid": 7, "ts": 1, "dur": 2},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "a", "tid": "12", "ts": 1, "dur": 2, "args": None},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "b", "tid": "-5", "ts": 1, "dur": 2, "args": {}},
        {**_KERNEL, "tid": "stream x", "args": {"correlation": 3, "stream": None}},
        {"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "tid": True, "ts": 1, "dur": 2}],
    "escapes in names and other strings": [_event(name='aten::f<"x">'), _event(name="tab\there"),
                                           {"cat": "x", "name": "k", "args": {"note": "\u00e9\n\"q\""}}],
    "numbers of every shape where they are not read": [{"cat": "x", "v": [0, -0, 1.5e-3, 2E+10, -0.0, 1e-400,
                                                                            12345678901234567890123]}],
    "a kernel's bytes of any shape": [{**_KERNEL, "args": {"stream": 7, "bytes": [1]}}],
    "nested values": [_event(args={"External id": 5, "Input Dims": [[[1, [2]], {"a": {"b": [None, True]}}]]})],
    "ts written as an integer, negative zero": [_event(ts=-0, dur=0), _event(ts=-0.0, dur=-0.0)],
    "long names, strings and numbers": [
        _event(name="aten::a_rather_long_operator_name", ts=1700000000000000.123456, dur=123456789012,
               args={"External id": 123456789012345678, "Record function id": 1234567890123456789,
                     "note": "abcdefghijklmnop\"qrstuvwxyz\\0123456789abcdef\n", "Trace name": "PyTorch Profiler"}),
        {**_KERNEL, "name": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >",
         "args": {"stream": 7, "correlation": 40, "External id": 5, "Collective nam": 1, "Collective namf": 2}},
        _event(name="aten::a_rather_long_operator_name"), _event(name="aten::a_rather_long_operator_namf")],
}


def _write_text(tmp_path, text: str) -> str:  # noqa: ANN001
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    return str(path)


@needs_kernel
@pytest.mark.parametrize("case", sorted(set(CORNERS) | set(KERNEL_CORNERS)))
def test_the_kernel_gives_the_dict_paths_columns(tmp_path, monkeypatch, case):
    events = (CORNERS.get(case) or KERNEL_CORNERS[case]) * 40
    fast, plain, _ = _kernel_and_dict(_write(tmp_path, events), monkeypatch)
    assert fast == plain


TAKEN_BY_KERNEL = ("host ops of both kinds, ts written as an integer", "host op without args, tid, pid, ts or dur",
                   "host op with null args, empty name", "host op not complete (skipped)",
                   "communication host ops keep their args", "GPU activity", "an NCCL kernel keeps its args",
                   "a kernel's bytes (not read)", "a GPU event without a stream (its tid)",
                   "new names, then an event for the dict path", "runtime and driver calls",
                   "stream ranges and syncs", "thread names, twice", "ids at the 64-bit edges",
                   "a stream range and a kernel without a stream arg (on their tid)", "nested values",
                   "numbers of every shape where they are not read", "a kernel's bytes of any shape",
                   "ts written as an integer, negative zero", "other events, of any shape",
                   "long names, strings and numbers")
DECLINED_BY_KERNEL = ("ids written as floats and strings", "times beyond 2**53 us (exact only as written)",
                      "non-ASCII names", "escapes in names and other strings")


@needs_kernel
@pytest.mark.parametrize("case", TAKEN_BY_KERNEL + DECLINED_BY_KERNEL)
def test_the_kernel_takes_the_common_events_and_declines_the_rest(case):
    text = json.dumps(CORNERS.get(case) or KERNEL_CORNERS[case], indent=1).encode()
    got = kineto.KERNEL.events(text, 1, len(text) - 1, {})
    assert (got is not None) == (case in TAKEN_BY_KERNEL)


@needs_kernel
@pytest.mark.parametrize("text", [
    '[{"cat": "kernel", "args": {"stream": 1}},]',  # a trailing comma (the chunk readers allow it)
    '[{"cat": "x", "name": "a\\ud800"}]', '[{"cat": "x", "v": 1e400}]', '[{"cat": "x", "v": 01}]',
    '[{"cat": "x", "v": "\\x"}]', '[{"cat": "x", "v": nul}]', '[{"cat": "x", "v": [1 2]}]',
    '[{"cat": "x", "v": "\t"}]', '[{"c\\u0061t": "kernel"}]', '[{"cat": "kernel", "args": {"stream": 1, "stream": 2}}]',
    '[{"cat": "x", "v": "abcdefghijklmnop\tq"}]', '[{"cat": "x", "v": "abcdefghijklmnop\\qrs"}]',
    '[{"cat": "x", "v": "abcdefghijklmnop\u00e9"}]', '[{"cat": "x", "v": 12345678901234567.}]',
    '[{"cat": "x"} {"cat": "x"}]', '[1]', '[{"cat": "gpu_user_annotation", "tid": "--1"}]', '[{"cat": "x", "v": ' + "[" * 80 + "]" * 80 + "}]"])
def test_the_kernel_declines_what_it_does_not_vouch_for(text):
    data = text.encode()
    assert kineto.KERNEL.events(data, 1, len(data) - 1, {}) is None


@needs_kernel
@pytest.mark.parametrize("tail", ['"INFO": ["a]"]}', '"INFO": [{"a": 1}], "x": 2}'])
def test_the_kernel_reads_an_array_followed_by_another(tmp_path, monkeypatch, tail):
    events = json.dumps(CORNERS["GPU activity"] + CORNERS["runtime and driver calls"], indent=1)
    path = _write_text(tmp_path, '{"schemaVersion": 1, "traceEvents": ' + events + ", " + tail)
    fast, plain, took = _kernel_and_dict(path, monkeypatch)
    assert took and fast == plain


@needs_kernel
@pytest.mark.parametrize("text", ['{"traceEvents": [{"cat": "x", "v": 1e400}]}',
                                  '{"traceEvents": [{"cat": "kernel", "args": {"stream": 1}}], "INFO": [}'])
def test_a_document_the_kernel_declines_reads_as_without_it(tmp_path, monkeypatch, text):
    def outcome() -> object:
        try:
            return _fields(load_kineto(path))
        except EtkitError as exc:  # (KinetoTraceError, or the JSON reader's)
            return str(exc)
    path = _write_text(tmp_path, text)
    with_kernel = outcome()
    monkeypatch.setattr(kineto, "KERNEL", None)
    assert with_kernel == outcome()


@needs_kernel
def test_the_kernel_reads_a_mapped_file(tmp_path, monkeypatch):
    from etkit.pytorch import jsonio

    monkeypatch.setattr(jsonio, "MAP_BYTES", 1)  # (a large plain file is mapped, not read)
    fast, plain, took = _kernel_and_dict(_write(tmp_path, CORNERS["GPU activity"] * 40), monkeypatch)
    assert took and fast == plain


@needs_kernel
@pytest.mark.shared_data
def test_mutated_traces_read_as_without_the_kernel(tmp_path, monkeypatch):
    """Bytes of a real trace changed, cut or added at random: the kernel's reading (or its declining) gives what
    the readers without it give, columns or error."""
    import gzip
    import random

    source = kineto_files(KINETO_TRACES["hta-event-sync-streams"])[0].path
    text = gzip.decompress(source.read_bytes())
    rng = random.Random(11)
    path = tmp_path / "t.json"

    def outcome(kernel: object) -> object:
        monkeypatch.setattr(kineto, "KERNEL", kernel)
        try:
            return _fields(load_kineto(path))
        except Exception as exc:  # noqa: BLE001 - whatever the readers do, the same
            return type(exc).__name__, str(exc)
    taken = 0
    for _ in range(200):
        mutated = bytearray(text)
        for _ in range(rng.choice((1, 1, 2, 5))):
            at = rng.randrange(len(mutated))
            how = rng.random()
            if how < 0.4:
                mutated[at] = ord(rng.choice('{}[],:"\\ -.0123456789eE+tfnu\xe9x\n'))
            elif how < 0.7:
                del mutated[at:at + rng.choice((1, 1, 3, 40))]
            else:
                mutated[at:at] = rng.choice((b",", b'"', b"{}", b"-1", b"1e400", b"\\u00e9", b" \n"))
        path.write_bytes(bytes(mutated))
        kernel = kineto.KERNEL
        assert outcome(kernel) == outcome(None)
        monkeypatch.setattr(kineto, "KERNEL", kernel)
        start = mutated.find(b"[", mutated.find(b'"traceEvents"'))
        taken += kernel.events(bytes(mutated), start + 1, mutated.rfind(b"]"), {}) is not None
    assert taken > 50  # (most mutations leave a trace the kernel takes)
