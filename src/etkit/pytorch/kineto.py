"""Reading Kineto (Chrome trace JSON) files as columns: CPU ops, GPU activity, launches, syncs, threads.

Only what linking and conversion use is kept, as numpy arrays (one row per event), read chunk by chunk
(see :mod:`etkit.pytorch.jsonio`). Categories: ``cpu_op``/``user_annotation`` are host ops (matched to
host ET nodes), ``kernel``/``gpu_memcpy``/``gpu_memset`` are GPU activity, ``cuda_runtime``/``cuda_driver``
(and their HIP twins) are runtime calls (launches tie a GPU activity to the CPU op that issued it by
``correlation``), ``gpu_user_annotation`` are ranges on a GPU stream, ``cuda_sync`` are the device-side
waits (a stream waiting for an event another stream records, a host waiting for the device).

Times: ``*_ts``/``*_dur`` are µs as written (float); ``*_ts_ns``/``*_dur_ns`` the same as exact integer
nanoseconds (a µs value's fraction rounded to the ns it was written with; add ``base_time_ns`` for Unix time).

A chunk of events is decoded by msgspec straight into typed records holding only the fields read here (no
dict per event; the other fields are skipped unparsed); a chunk that path cannot take (a field of another
type or out of range, an event the reader treats specially, non-ASCII text, anything malformed) goes
through orjson's dicts, which report the fault. Both give the same columns.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from collections.abc import Callable
from dataclasses import field
from typing import Any

import numpy as np
import orjson

from ..errors import EtkitError
from ..records import record
from .jsonio import read_array_document

try:  # the whole of a trace's events in one pass in C (optional: the typed and dict paths give the same columns)
    from . import _kineto as KERNEL
except ImportError:  # pragma: no cover - built without a C compiler
    KERNEL = None

__all__ = ["KinetoTrace", "KinetoTraceError", "load_kineto", "CPU_CATEGORIES", "GPU_CATEGORIES", "us_to_ns",
           "COMM_ARGS"]

CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
_NO_ID = -1
#: Event args that describe a collective (record_param_comms, nccl:*, NCCL kernels): kept per event.
COMM_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size", "Process Group Name",
             "Process Group Description", "Process Group Ranks", "In split size", "Out split size",
             "Global rank start", "Global rank stride", "Rank", "Src Rank", "Dst Rank")
#: Args kept for communication ops (names starting with :data:`COMM_OP_PREFIXES`): their arguments.
INPUT_ARGS = ("Input Dims", "Input type", "Concrete Inputs")
COMM_OP_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::", "gloo:", "nccl:", "record_param_comms")
#: What :func:`load_kineto` does with an event of each category it keeps: 0-1 host op (``cpu_op``,
#: ``user_annotation``: :attr:`KinetoTrace.cpu_cat`), 2-4 GPU activity, 5-6 runtime call (6: a driver call),
#: 7 a range on a GPU stream, 8 a device-side wait.
_KIND_OF = {"cpu_op": 0, "user_annotation": 1, "kernel": 2, "gpu_memcpy": 3, "gpu_memset": 4, "cuda_runtime": 5,
            "cuda_driver": 6, "gpu_user_annotation": 7, "cuda_sync": 8}
_CATEGORY_OF_KIND = tuple(_KIND_OF)


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """Exact integer ns of µs values (float64 holds a Kineto timestamp's µs exactly to the ns it was
    written with; ``us * 1000`` in float64 would not: epoch ns need more bits than a float64 has)."""
    us = np.asarray(us, dtype=np.float64)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)


@record
class KinetoTrace:
    """Columns of one Kineto trace. Times are µs relative to the trace's own clock (``ts`` as written)."""

    path: str
    rank: int | None
    world_size: int | None
    pg_config: list[dict[str, Any]]
    base_time_ns: int
    names: list[str]
    # CPU ops
    cpu_name: np.ndarray
    cpu_ts: np.ndarray
    cpu_dur: np.ndarray
    cpu_tid: np.ndarray
    cpu_rf_id: np.ndarray
    cpu_ext_id: np.ndarray
    # GPU activity
    gpu_name: np.ndarray
    gpu_ts: np.ndarray
    gpu_dur: np.ndarray
    gpu_stream: np.ndarray
    gpu_correlation: np.ndarray
    gpu_ext_id: np.ndarray
    gpu_pg: list[str | None]
    gpu_category: list[str]
    # launches
    launch_ts: np.ndarray
    launch_tid: np.ndarray
    launch_correlation: np.ndarray
    launch_ext_id: np.ndarray
    thread_names: dict[int, str] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)  # process ids of the CPU ops (one process per rank)
    cpu_cat: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))  # 0 cpu_op, 1 user_annotation
    cpu_args: dict[int, dict[str, Any]] = field(default_factory=dict)  # row -> COMM_ARGS/INPUT_ARGS of comm ops
    gpu_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # memcpy/memset bytes, -1
    gpu_args: dict[int, dict[str, Any]] = field(default_factory=dict)  # row -> COMM_ARGS of NCCL kernels
    launch_name: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    launch_dur: np.ndarray = field(default_factory=lambda: np.zeros(0))
    launch_driver: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # cuda_driver, not runtime
    # GPU user annotations (ranges on a stream)
    ann_name: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ann_ts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ann_dur: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ann_stream: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # device-side syncs: kind ("Stream Wait Event", "Event Sync", "Context Sync", ...), the stream that
    # waits (-1: the host), the stream and event-record correlation it waits on, its own correlation
    sync_name: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sync_ts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sync_dur: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sync_stream: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sync_wait_stream: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sync_wait_corr: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sync_correlation: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cache: dict[str, Any] = field(default_factory=dict, repr=False)  # derived tables (e.g. the nesting), once

    # exact integer ns (see the module docstring)
    @property
    def cpu_ts_ns(self) -> np.ndarray:
        return us_to_ns(self.cpu_ts)

    @property
    def cpu_dur_ns(self) -> np.ndarray:
        return us_to_ns(self.cpu_dur)

    @property
    def gpu_ts_ns(self) -> np.ndarray:
        return us_to_ns(self.gpu_ts)

    @property
    def gpu_dur_ns(self) -> np.ndarray:
        return us_to_ns(self.gpu_dur)

    @property
    def launch_ts_ns(self) -> np.ndarray:
        return us_to_ns(self.launch_ts)

    @property
    def launch_dur_ns(self) -> np.ndarray:
        return us_to_ns(self.launch_dur)

    @property
    def has_rf_ids(self) -> bool:
        return bool((self.cpu_rf_id != _NO_ID).any())

    @property
    def has_external_ids(self) -> bool:
        return bool((self.cpu_ext_id != _NO_ID).any())

    def gloo_threads(self) -> list[int]:
        """OS thread ids of gloo worker threads (``pt_gloo_runloop``), ascending."""
        return sorted(t for t, n in self.thread_names.items() if "gloo_runloop" in n)


def _num(value: Any) -> int:
    """An integer id from a field Kineto writes loosely (GPU ``tid``s may be labels): -1 when not an integer."""
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return _NO_ID


class _BadField(Exception):
    """A field of one trace event holds a value of the wrong type (turned into a KinetoTraceError)."""

    def __init__(self, field_name: str, value: Any, expected: str) -> None:
        super().__init__(field_name)
        self.field_name, self.value, self.expected = field_name, value, expected


class KinetoTraceError(EtkitError):
    """A Kineto trace that cannot be read; the message names the file, the event and the field."""


#: Largest magnitude of an id (int64) and of a time in µs (whose nanoseconds must fit an int64).
_MAX_ID = (1 << 63) - 1
_MAX_US = _MAX_ID / 1000


def _id(value: Any, field_name: str) -> int:
    """A strict integer id (int, integral float or digit string; absent = -1) of at most 64 bits; anything
    else is malformed."""
    if value is None:
        return _NO_ID
    if type(value) is float and value.is_integer():
        value = int(value)
    elif type(value) is str and value.lstrip("-").isdigit() and len(value) < 24:
        value = int(value)
    if type(value) is int and -_MAX_ID <= value <= _MAX_ID:
        return value
    raise _BadField(field_name, value, "an integer of at most 64 bits")


def _time(value: Any, field_name: str) -> float:
    """A finite number of µs (``ts``) or a finite non-negative one (``dur``); absent = 0."""
    if value is None:
        return 0.0
    if (type(value) is float or type(value) is int) and math.isfinite(value) and abs(value) <= _MAX_US:
        if field_name == "dur" and value < 0:
            raise _BadField(field_name, value, "a non-negative number")
        return float(value)
    wanted = "a number" if field_name == "ts" else "a non-negative number"
    raise _BadField(field_name, value, f"{wanted} of µs below {_MAX_US:.3g} (whose ns fit 64 bits)")


def _args(ev: dict[str, Any]) -> dict[str, Any]:
    args = ev.get("args")
    if args is None:
        return {}
    if type(args) is not dict:
        raise _BadField("args", args, "an object")
    return args


def _name(ev: dict[str, Any]) -> str:
    name = ev.get("name", "")
    if type(name) is not str:
        raise _BadField("name", name, "a string")
    return name


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _header_fields(header: dict[str, Any], label: str) -> tuple[int | None, int | None, list[dict[str, Any]], int]:
    """``distributedInfo`` (rank, world size, process groups) and ``baseTimeNanoseconds``, type-checked."""
    def bad(field_name: str, value: Any, expected: str) -> KinetoTraceError:
        return KinetoTraceError(f"{label}: field {field_name!r} is {_show(value)}, not {expected}")

    info = header.get("distributedInfo")
    if info is None:
        info = {}
    if type(info) is not dict:
        raise bad("distributedInfo", info, "an object")
    numbers: list[int | None] = []
    for key in ("rank", "world_size"):
        value = info.get(key)
        if value is not None and (type(value) is not int or value < 0):
            raise bad(f"distributedInfo.{key}", value, "a non-negative integer")
        numbers.append(value)
    rank, world = numbers
    if rank is not None and world is not None and rank >= world:
        raise bad("distributedInfo.rank", rank, f"a rank below world_size {world}")
    groups = info.get("pg_config")
    if groups is None:
        groups = []
    if type(groups) is not list:
        raise bad("distributedInfo.pg_config", groups, "a list")
    for i, entry in enumerate(groups):
        where = f"distributedInfo.pg_config[{i}]"
        if type(entry) is not dict:
            raise bad(where, entry, "an object")
        if type(entry.get("pg_name")) not in (str, int):
            raise bad(f"{where}.pg_name", entry.get("pg_name"), "a string")
        ranks = entry.get("ranks")
        if ranks is not None and (type(ranks) is not list or any(type(r) is not int or r < 0 for r in ranks)):
            raise bad(f"{where}.ranks", ranks, "a list of ranks")
    base = header.get("baseTimeNanoseconds")
    try:
        base_ns = _id(base, "baseTimeNanoseconds")
    except _BadField:
        raise bad("baseTimeNanoseconds", base, "an integer") from None
    return rank, world, list(groups), max(base_ns, 0)


def load_kineto(path: str | os.PathLike[str], *, rank: int | None = None) -> KinetoTrace:
    """Read a Kineto trace JSON (plain or gzip).

    Every field the reader uses is type-checked: a malformed one raises :class:`KinetoTraceError` naming
    the file, the event (index in ``traceEvents`` and name) and the field.
    """
    label = f"{path}" + (f" (rank {rank})" if rank is not None else "")
    doc = read_array_document(path, "traceEvents")
    if not doc.found:
        raise KinetoTraceError(f"{label}: not a Kineto trace (no 'traceEvents' array)")
    header = _header_fields(doc.header, label)
    if KERNEL is not None:
        trace = doc.whole(lambda text, start, stop: _kernel_trace(text, start, stop, str(path), header))
        if trace is not None:
            return trace
    cols = _Columns()
    cpu_op, gpu_op, launch, annotation, sync = cols.cpu_op, cols.gpu_op, cols.launch, cols.annotation, cols.sync
    kind_of = _KIND_OF
    first = 0  # index of the chunk's first event in traceEvents
    for chunk in doc.chunks(fast=cols.typed_chunk):
        if chunk and chunk[0] is _TAKEN:  # the typed path took these events
            first += len(chunk)
            continue
        ev: Any = None
        try:
            for ev in chunk:
                if type(ev) is not dict:
                    raise _BadField("", ev, "an object")
                cat = ev.get("cat")
                if type(cat) is str:
                    kind = kind_of.get(cat)
                elif cat is None:
                    kind = None
                else:
                    raise _BadField("cat", cat, "a string")
                if kind is None:
                    if ev.get("ph") == "M" and ev.get("name") == "thread_name":
                        cols.thread_name(ev)
                elif kind <= 1:
                    if ev.get("ph") == "X":  # one per host op
                        cpu_op(ev, kind)
                elif kind <= 4:
                    gpu_op(ev, _CATEGORY_OF_KIND[kind])
                elif kind <= 6:
                    launch(ev, kind == 6)
                elif kind == 7:
                    annotation(ev)
                else:
                    sync(ev)
        except _BadField as bad:
            raise _event_error(label, chunk, first, ev, bad) from None
        first += len(chunk)
    return cols.trace(str(path), *header)


class _Columns:
    """The columns of a Kineto trace while its events are read: one list per kept field, by event kind.
    The common events (host ops, kernels and copies, launches) have their usual types checked inline; any
    other shape goes through the strict field readers (``_id``, ``_time``, ``_args``, ``_name``)."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.cpu: list[tuple[int, float, float, int, int, int]] = []  # name, ts, dur, tid, rf_id, ext_id
        self.cpu_cat: list[int] = []
        self.cpu_args: dict[int, dict[str, Any]] = {}
        # name, ts, dur, stream, correlation, ext_id, pg_name, category, bytes
        self.gpu: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [], [])
        self.gpu_args: dict[int, dict[str, Any]] = {}
        self.launches: tuple[list[Any], ...] = ([], [], [], [], [], [], [])  # ts, tid, corr, ext, name, dur, driver
        self.ann: tuple[list[Any], ...] = ([], [], [], [])  # name, ts, dur, stream
        # name, ts, dur, stream, wait_on_stream, wait_on_cuda_event_record_corr_id, correlation
        self.syncs: tuple[list[Any], ...] = ([], [], [], [], [], [], [])
        self.threads: dict[int, str] = {}
        self.pids: set[int] = set()

    def cpu_op(self, ev: dict[str, Any], cat: int) -> None:
        """A host op (complete event); ``cat`` 0 for ``cpu_op``, 1 for ``user_annotation``."""
        names = self.names
        args = ev.get("args")
        if type(args) is not dict:
            args = _args(ev)
        tid, pid, ts, dur = ev.get("tid"), ev.get("pid"), ev.get("ts"), ev.get("dur")
        rf, ext = args.get("Record function id", _NO_ID), args.get("External id", _NO_ID)
        if not (int is type(tid) is type(rf) is type(ext) is type(pid)) \
                or max(tid, rf, ext, pid) > _MAX_ID or min(tid, rf, ext, pid) < -_MAX_ID:
            tid, pid = _id(tid, "tid"), _id(pid, "pid")
            rf, ext = _id(rf, "args.Record function id"), _id(ext, "args.External id")
        if not ((type(ts) is float or type(ts) is int) and (type(dur) is float or type(dur) is int)) \
                or not (0 <= dur <= _MAX_US and -_MAX_US <= ts <= _MAX_US):
            ts, dur = _time(ts, "ts"), _time(dur, "dur")
        name = ev.get("name", "")
        index = names.get(name) if type(name) is str else None
        if index is None:
            index = names[_name(ev)] = len(names)
        self.pids.add(pid)
        if "Collective name" in args or (type(name) is str and name.startswith(COMM_OP_PREFIXES)):
            self.cpu_args[len(self.cpu)] = {k: args[k] for k in COMM_ARGS + INPUT_ARGS if k in args}
        self.cpu.append((index, ts, dur, tid, rf, ext))
        self.cpu_cat.append(cat)

    def gpu_op(self, ev: dict[str, Any], cat: str) -> None:
        """GPU activity: a kernel, copy or memset."""
        gpu, names = self.gpu, self.names
        args = ev.get("args")
        name, ts, dur = ev.get("name"), ev.get("ts"), ev.get("dur")
        if type(args) is dict and type(name) is str:  # the common case, checked inline
            stream, corr, ext = args.get("stream"), args.get("correlation", _NO_ID), args.get("External id", _NO_ID)
            nbytes = _NO_ID if cat == "kernel" else args.get("bytes", _NO_ID)
            if (int is type(stream) is type(corr) is type(ext) is type(nbytes)
                    and -_MAX_ID <= min(stream, corr, ext, nbytes) and max(stream, corr, ext, nbytes) <= _MAX_ID
                    and (type(ts) is float or type(ts) is int)
                    and (type(dur) is float or type(dur) is int) and 0 <= dur <= _MAX_US
                    and abs(ts) <= _MAX_US and "Collective name" not in args
                    and "Process Group Name" not in args):
                index = names.get(name)
                if index is None:
                    index = names[name] = len(names)
                gpu[0].append(index)
                gpu[1].append(float(ts))
                gpu[2].append(float(dur))
                gpu[3].append(stream)
                gpu[4].append(corr)
                gpu[5].append(ext)
                gpu[6].append(None)
                gpu[7].append(cat)
                gpu[8].append(nbytes)
                return
        args = _args(ev)
        gpu[0].append(names.setdefault(_name(ev), len(names)))
        gpu[1].append(_time(ev.get("ts"), "ts"))
        gpu[2].append(_time(ev.get("dur"), "dur"))
        stream = args.get("stream")
        gpu[3].append(_num(ev.get("tid")) if stream is None else _id(stream, "args.stream"))
        gpu[4].append(_id(args.get("correlation"), "args.correlation"))
        gpu[5].append(_id(args.get("External id"), "args.External id"))
        pg = args.get("Process Group Name")
        gpu[6].append(str(pg) if pg is not None else None)
        gpu[7].append(cat)
        gpu[8].append(_id(args.get("bytes"), "args.bytes") if cat != "kernel" else _NO_ID)
        if "Collective name" in args:
            self.gpu_args[len(gpu[0]) - 1] = {k: args[k] for k in COMM_ARGS if k in args}

    def launch(self, ev: dict[str, Any], driver: bool) -> None:
        """A runtime call (``cuda_runtime``) or, ``driver``, a driver call (``cuda_driver``)."""
        launch, names = self.launches, self.names
        args = ev.get("args")
        name, ts, dur, tid = ev.get("name"), ev.get("ts"), ev.get("dur"), ev.get("tid")
        if type(args) is dict and type(name) is str:  # the common case, checked inline
            corr, ext = args.get("correlation", _NO_ID), args.get("External id", _NO_ID)
            if (int is type(tid) is type(corr) is type(ext) and -_MAX_ID <= min(tid, corr, ext)
                    and max(tid, corr, ext) <= _MAX_ID and (type(ts) is float or type(ts) is int)
                    and (type(dur) is float or type(dur) is int) and 0 <= dur <= _MAX_US
                    and abs(ts) <= _MAX_US):
                index = names.get(name)
                if index is None:
                    index = names[name] = len(names)
                launch[0].append(float(ts))
                launch[1].append(tid)
                launch[2].append(corr)
                launch[3].append(ext)
                launch[4].append(index)
                launch[5].append(float(dur))
                launch[6].append(driver)
                return
        args = _args(ev)
        launch[0].append(_time(ev.get("ts"), "ts"))
        launch[1].append(_id(ev.get("tid"), "tid"))
        launch[2].append(_id(args.get("correlation"), "args.correlation"))
        launch[3].append(_id(args.get("External id"), "args.External id"))
        launch[4].append(names.setdefault(_name(ev), len(names)))
        launch[5].append(_time(ev.get("dur"), "dur"))
        launch[6].append(driver)

    def _on_stream(self, cols: tuple[list[Any], ...], ev: dict[str, Any]) -> dict[str, Any]:
        """Name, ts, dur and stream of an event on a GPU stream into ``cols[0:4]``; returns its args."""
        args = _args(ev)
        cols[0].append(self.names.setdefault(_name(ev), len(self.names)))
        cols[1].append(_time(ev.get("ts"), "ts"))
        cols[2].append(_time(ev.get("dur"), "dur"))
        stream = args.get("stream")
        cols[3].append(_num(ev.get("tid")) if stream is None else _id(stream, "args.stream"))
        return args

    def annotation(self, ev: dict[str, Any]) -> None:
        """A range on a GPU stream (``gpu_user_annotation``)."""
        self._on_stream(self.ann, ev)

    def sync(self, ev: dict[str, Any]) -> None:
        """A device-side wait (``cuda_sync``)."""
        sync = self.syncs
        args = self._on_stream(sync, ev)
        sync[4].append(_id(args.get("wait_on_stream"), "args.wait_on_stream"))
        sync[5].append(_id(args.get("wait_on_cuda_event_record_corr_id"), "args.wait_on_cuda_event_record_corr_id"))
        sync[6].append(_id(args.get("correlation"), "args.correlation"))

    def typed_chunk(self, text: bytes) -> list[Any] | None:
        """Read a chunk of events (a JSON array) through typed records (:func:`_event_decoder`): what the dict path would
        add to the columns, added; ``[_TAKEN] * len(events)``. ``None`` (nothing added) when an event needs
        the dict path: a field of another type or out of range, a GPU event without a stream, non-ASCII
        text (msgspec skips the fields it does not read unchecked: orjson would refuse bad UTF-8 there)."""
        if not text.isascii():
            return None
        import msgspec  # (imported by _event_decoder)

        try:
            events = _event_decoder()(text)
            taken = _TypedChunk(self).take(events)
        except (msgspec.MsgspecError, RecursionError, orjson.JSONDecodeError):
            return None
        if taken is None:
            return None
        taken.commit()
        return [_TAKEN] * len(events)

    def thread_name(self, ev: dict[str, Any]) -> None:
        """A thread's name (metadata event)."""
        self.thread_label(_num(ev.get("tid")), str(_args(ev).get("name", "")))

    def thread_label(self, tid: int, label_name: str) -> None:
        # Kineto may name a thread twice; a gloo worker name is the informative one.
        if tid not in self.threads or "gloo" in label_name:
            self.threads[tid] = label_name

    def trace(self, path: str, rank: int | None, world: int | None, pg_config: list[dict[str, Any]],
              base_ns: int) -> KinetoTrace:
        """The columns as numpy arrays, with the header's fields."""
        cols = list(zip(*self.cpu)) if self.cpu else [()] * 6
        gpu, launch, ann, sync = self.gpu, self.launches, self.ann, self.syncs
        f64, i64 = np.float64, np.int64
        return KinetoTrace(
            path, rank, world, pg_config, base_ns, list(self.names),
            np.array(cols[0], dtype=i64), np.array(cols[1], dtype=f64), np.array(cols[2], dtype=f64),
            np.array(cols[3], dtype=i64), np.array(cols[4], dtype=i64), np.array(cols[5], dtype=i64),
            np.array(gpu[0], dtype=i64), np.array(gpu[1], dtype=f64), np.array(gpu[2], dtype=f64),
            np.array(gpu[3], dtype=i64), np.array(gpu[4], dtype=i64), np.array(gpu[5], dtype=i64), gpu[6], gpu[7],
            np.array(launch[0], dtype=f64), np.array(launch[1], dtype=i64), np.array(launch[2], dtype=i64),
            np.array(launch[3], dtype=i64), self.threads, self.pids,
            cpu_cat=np.array(self.cpu_cat, dtype=np.int8), cpu_args=self.cpu_args,
            gpu_bytes=np.array(gpu[8], dtype=i64), gpu_args=self.gpu_args,
            launch_name=np.array(launch[4], dtype=i64), launch_dur=np.array(launch[5], dtype=f64),
            launch_driver=np.array(launch[6], dtype=bool),
            ann_name=np.array(ann[0], dtype=i64), ann_ts=np.array(ann[1], dtype=f64),
            ann_dur=np.array(ann[2], dtype=f64), ann_stream=np.array(ann[3], dtype=i64),
            sync_name=np.array(sync[0], dtype=i64), sync_ts=np.array(sync[1], dtype=f64),
            sync_dur=np.array(sync[2], dtype=f64), sync_stream=np.array(sync[3], dtype=i64),
            sync_wait_stream=np.array(sync[4], dtype=i64), sync_wait_corr=np.array(sync[5], dtype=i64),
            sync_correlation=np.array(sync[6], dtype=i64))


# -- the C path: the whole array of events at once (etkit.pytorch._kineto) --------------------------------------
def _loads_or_none(text: bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def _kernel_trace(text: Any, start: int, stop: int, path: str,
                  header: tuple[int | None, int | None, list[dict[str, Any]], int]) -> KinetoTrace | None:
    """The trace read by :mod:`etkit.pytorch._kineto` from the events ``text[start:stop]``: the columns of
    :class:`_Columns`, the args the readers keep parsed by orjson from their spans; ``None`` when the kernel
    declines the text (then the chunk readers read it)."""
    names: dict[str, int] = {}
    got = KERNEL.events(text, start, stop, names)
    if got is None:
        return None
    cpu, gpu, launch, ann, sync, spans, end = got
    if end != stop and not isinstance(_loads_or_none(text[:start - 1] + b"null" + text[end + 1:]), dict):
        return None  # (the array ends before the document's last "]": what follows must complete the document)
    i64, f64, i8 = np.int64, np.float64, np.int8

    def col(b: bytearray, dtype: Any) -> np.ndarray:
        return np.frombuffer(b, dtype=dtype)

    def args_at(span: np.ndarray) -> dict[str, Any]:
        a, b = span.tolist()
        return orjson.loads(text[a:b]) if b > a else {}

    name_list = list(names)
    cpu_name = col(cpu[0], i64)
    comm_name = np.fromiter((n.startswith(COMM_OP_PREFIXES) for n in name_list), bool, len(name_list))
    comm = col(cpu[8], i8).astype(bool)
    if len(name_list):
        comm |= comm_name[cpu_name]
    cpu_span = col(cpu[9], i64).reshape(-1, 2)
    cpu_args = {}
    for row in np.flatnonzero(comm).tolist():
        args = args_at(cpu_span[row])
        cpu_args[row] = {k: args[k] for k in COMM_ARGS + INPUT_ARGS if k in args}
    gpu_kind = col(gpu[7], i8)
    gpu_pg: list[str | None] = [None] * len(gpu_kind)
    gpu_args = {}
    gpu_span = col(gpu[9], i64).reshape(-1, 2)
    for row in np.flatnonzero(col(gpu[8], i8)).tolist():
        args = args_at(gpu_span[row])
        pg = args.get("Process Group Name")
        gpu_pg[row] = None if pg is None else str(pg)
        if "Collective name" in args:
            gpu_args[row] = {k: args[k] for k in COMM_ARGS if k in args}
    threads = _Columns()
    try:
        for a, b in col(spans, i64).reshape(-1, 2).tolist():
            threads.thread_name(orjson.loads(text[a:b]))
    except _BadField:
        return None  # (the dict path reports it)
    rank, world, pg_config, base_ns = header
    return KinetoTrace(
        path, rank, world, pg_config, base_ns, name_list,
        cpu_name, col(cpu[1], f64), col(cpu[2], f64), col(cpu[3], i64), col(cpu[4], i64), col(cpu[5], i64),
        col(gpu[0], i64), col(gpu[1], f64), col(gpu[2], f64), col(gpu[3], i64), col(gpu[4], i64), col(gpu[5], i64),
        gpu_pg, [_CATEGORY_OF_KIND[k] for k in gpu_kind.tolist()],
        col(launch[0], f64), col(launch[1], i64), col(launch[2], i64), col(launch[3], i64),
        threads.threads, set(col(cpu[6], i64).tolist()),
        cpu_cat=col(cpu[7], i8), cpu_args=cpu_args, gpu_bytes=col(gpu[6], i64), gpu_args=gpu_args,
        launch_name=col(launch[4], i64), launch_dur=col(launch[5], f64), launch_driver=col(launch[6], i8).astype(bool),
        ann_name=col(ann[0], i64), ann_ts=col(ann[1], f64), ann_dur=col(ann[2], f64), ann_stream=col(ann[3], i64),
        sync_name=col(sync[0], i64), sync_ts=col(sync[1], f64), sync_dur=col(sync[2], f64),
        sync_stream=col(sync[3], i64), sync_wait_stream=col(sync[4], i64), sync_wait_corr=col(sync[5], i64),
        sync_correlation=col(sync[6], i64))


# -- the typed path: msgspec decodes a chunk of events straight into these records ----------------------------
#: The args read: ids (absent: -1, as the dict path's defaults), a GPU event's stream (absent: None, the dict path
#: then uses the tid), and, as their JSON text, a thread's name and COMM_ARGS + INPUT_ARGS (orjson parses those
#: of the few events that keep them, as the dict path does).
_RAW_ARGS = {key: "raw_" + key.lower().replace(" ", "_") for key in ("name",) + COMM_ARGS + INPUT_ARGS}
@functools.cache
def _event_decoder() -> Callable[[bytes], list[Any]]:
    """msgspec's decoder of a chunk of events into typed records: made, and msgspec imported, when a chunk first
    takes the typed path (the C kernel reads a whole trace without it)."""
    import msgspec

    args = msgspec.defstruct(
        "_EventArgs",
        [("ext", int, msgspec.field(name="External id", default=_NO_ID)),
         ("rf", int, msgspec.field(name="Record function id", default=_NO_ID)),
         ("correlation", int, _NO_ID), ("stream", int | None, None),
         ("nbytes", int, msgspec.field(name="bytes", default=_NO_ID)), ("wait_on_stream", int, _NO_ID),
         ("wait_corr", int, msgspec.field(name="wait_on_cuda_event_record_corr_id", default=_NO_ID))]
        + [(attr, msgspec.Raw, msgspec.field(name=key, default=msgspec.Raw())) for key, attr in _RAW_ARGS.items()],
        gc=False)
    event = msgspec.defstruct(
        "_Event",
        [("ph", str | None, None), ("cat", str | None, None),
         ("name", str, ""),  # absent: "", as the dict path reads it
         ("pid", int | str, _NO_ID), ("tid", int | str, _NO_ID),
         ("ts", float, 0.0),  # absent: 0, as the dict path reads it
         ("dur", float, 0.0), ("args", args | None, None)],  # type: ignore[operator]
        gc=False)
    return msgspec.json.Decoder(list[event]).decode  # type: ignore[valid-type]


_TAKEN = object()  # a chunk's events the typed path took
#: Times the typed path takes: exact as float64 whether written as integers or not (beyond: the dict path).
_EXACT_US = float(1 << 53)


def _raw(args: Any, key: str) -> Any:
    """The arg ``key`` as orjson parses it, or ``_TAKEN`` when absent."""
    raw = getattr(args, _RAW_ARGS[key])
    return orjson.loads(bytes(raw)) if len(raw) else _TAKEN


def _kept(args: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """``{k: args[k] for k in keys if k in args}`` of typed args."""
    out = {}
    for key in keys:
        value = _raw(args, key)
        if value is not _TAKEN:
            out[key] = value
    return out


class _TypedChunk:
    """What one chunk of typed events adds to :class:`_Columns`, gathered apart and added by :meth:`commit`
    only when every event could be taken (the same values, in the same order, as the dict path's)."""

    def __init__(self, cols: _Columns) -> None:
        self.cols = cols
        self.cpu: list[tuple[int, float, float, int, int, int]] = []
        self.cpu_cat: list[int] = []
        self.cpu_args: dict[int, dict[str, Any]] = {}
        self.gpu: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [], [])
        self.gpu_args: dict[int, dict[str, Any]] = {}
        self.launches: tuple[list[Any], ...] = ([], [], [], [], [], [], [])
        self.ann: tuple[list[Any], ...] = ([], [], [], [])
        self.syncs: tuple[list[Any], ...] = ([], [], [], [], [], [], [])
        self.threads: list[tuple[Any, Any]] = []
        self.pids: list[int] = []
        self.ids: list[int] = []  # every id taken, for the 64-bit check

    def take(self, events: list[Any]) -> _TypedChunk | None:
        """Gather what ``events`` add (names are added to the columns' table at once, and removed again
        when the chunk is not taken)."""
        names = self.cols.names
        known = len(names)
        taken = None
        try:
            taken = self._take(events)
        finally:
            if taken is None:
                for name in list(itertools.islice(names, known, None)):
                    del names[name]
        return taken

    def _take(self, events: list[Any]) -> _TypedChunk | None:  # noqa: C901 - one dispatch, as load_kineto's
        kind_of, category_of, lim = _KIND_OF, _CATEGORY_OF_KIND, _EXACT_US
        cols = self.cols
        names = cols.names
        index = names.setdefault
        cpu, gpu, launch, ids = self.cpu, self.gpu, self.launches, self.ids
        cpu_append, cat_append, pid_append = cpu.append, self.cpu_cat.append, self.pids.append
        launch_appends = [column.append for column in launch]
        cpu_rows, gpu_rows = len(cols.cpu), len(cols.gpu[0])
        for ev in events:
            kind = kind_of.get(ev.cat)  # type: ignore[arg-type]
            if kind is None:
                if ev.ph == "M" and ev.name == "thread_name":
                    self.threads.append((ev.tid, ev.args))
                continue
            ts, dur, args = ev.ts, ev.dur, ev.args
            if kind <= 1:
                if ev.ph != "X":
                    continue
                tid, pid = ev.tid, ev.pid
                if type(tid) is not int or type(pid) is not int or not (0.0 <= dur <= lim and -lim <= ts <= lim):
                    return None
                name = ev.name
                if args is None:
                    rf = ext = _NO_ID
                    comm = name.startswith(COMM_OP_PREFIXES)
                else:
                    rf, ext = args.rf, args.ext
                    comm = len(args.raw_collective_name) > 0 or name.startswith(COMM_OP_PREFIXES)
                ids += (tid, pid, rf, ext)
                pid_append(pid)
                if comm:
                    self.cpu_args[cpu_rows + len(cpu)] = _kept(args, COMM_ARGS + INPUT_ARGS) if args is not None else {}
                cpu_append((index(name, len(names)), ts, dur, tid, rf, ext))
                cat_append(kind)
            elif kind <= 4:
                if args is None or args.stream is None or not (0.0 <= dur <= lim and -lim <= ts <= lim):
                    return None
                cat = category_of[kind]
                nbytes = _NO_ID if cat == "kernel" else args.nbytes
                ids += (args.stream, args.correlation, args.ext, nbytes)
                pg = None
                if len(args.raw_collective_name) or len(args.raw_process_group_name):  # (the dict path's general
                    pg = _raw(args, "Process Group Name")  # reader, to the same values)
                    pg = None if pg is _TAKEN or pg is None else str(pg)
                    if len(args.raw_collective_name):
                        self.gpu_args[gpu_rows + len(gpu[0])] = _kept(args, COMM_ARGS)
                gpu[0].append(index(ev.name, len(names)))
                gpu[1].append(ts)
                gpu[2].append(dur)
                gpu[3].append(args.stream)
                gpu[4].append(args.correlation)
                gpu[5].append(args.ext)
                gpu[6].append(pg)
                gpu[7].append(cat)
                gpu[8].append(nbytes)
            elif kind <= 6:
                tid = ev.tid
                if type(tid) is not int or not (0.0 <= dur <= lim and -lim <= ts <= lim):
                    return None
                corr, ext = (args.correlation, args.ext) if args is not None else (_NO_ID, _NO_ID)
                ids += (tid, corr, ext)
                launch_appends[0](ts)
                launch_appends[1](tid)
                launch_appends[2](corr)
                launch_appends[3](ext)
                launch_appends[4](index(ev.name, len(names)))
                launch_appends[5](dur)
                launch_appends[6](kind == 6)
            else:
                if args is None or args.stream is None or not (0.0 <= dur <= lim and -lim <= ts <= lim):
                    return None
                cols_of = self.ann if kind == 7 else self.syncs
                cols_of[0].append(index(ev.name, len(names)))
                cols_of[1].append(ts)
                cols_of[2].append(dur)
                cols_of[3].append(args.stream)
                ids.append(args.stream)
                if kind == 8:
                    cols_of[4].append(args.wait_on_stream)
                    cols_of[5].append(args.wait_corr)
                    cols_of[6].append(args.correlation)
                    ids += (args.wait_on_stream, args.wait_corr, args.correlation)
        if ids and (max(ids) > _MAX_ID or min(ids) < -_MAX_ID):
            return None
        self.thread_labels = [(tid, "" if args is None or (label := _raw(args, "name")) is _TAKEN else str(label))
                              for tid, args in self.threads]
        return self

    def commit(self) -> None:
        """Add what was taken to the columns."""
        cols = self.cols
        cols.cpu += self.cpu
        cols.cpu_cat += self.cpu_cat
        cols.cpu_args.update(self.cpu_args)
        cols.gpu_args.update(self.gpu_args)
        for mine, theirs in ((self.gpu, cols.gpu), (self.launches, cols.launches), (self.ann, cols.ann),
                             (self.syncs, cols.syncs)):
            for a, b in zip(mine, theirs):
                b += a
        cols.pids.update(self.pids)
        for tid, label in self.thread_labels:
            cols.thread_label(_num(tid), label)


def _event_error(label: str, chunk: list[Any], first: int, ev: Any, bad: _BadField) -> KinetoTraceError:
    index = first + next((i for i, item in enumerate(chunk) if item is ev), 0)
    if not bad.field_name:
        return KinetoTraceError(f"{label}: traceEvents[{index}] is {_show(ev)}, not an object")
    name = ev.get("name")
    event = f"traceEvents[{index}]" + (f" ({name!r})" if type(name) is str else "")
    return KinetoTraceError(f"{label}: {event}: field {bad.field_name!r} is {_show(bad.value)}, "
                            f"not {bad.expected}")
