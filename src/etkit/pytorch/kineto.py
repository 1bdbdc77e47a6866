"""Reading Kineto (Chrome trace JSON) files as columns: CPU ops, GPU activity, launches, threads.

Only what linking and conversion use is kept, as numpy arrays (one row per event), read chunk by chunk
(see :mod:`etkit.pytorch.jsonio`). Categories: ``cpu_op``/``user_annotation`` are host ops (matched to
host ET nodes), ``kernel``/``gpu_memcpy``/``gpu_memset`` are GPU activity, ``cuda_runtime``/``cuda_driver``
(and their HIP twins) are launches that tie a GPU activity to the CPU op that issued it by ``correlation``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import EtkitError
from .jsonio import read_array_document

__all__ = ["KinetoTrace", "load_kineto", "CPU_CATEGORIES", "GPU_CATEGORIES"]

CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
_NO_ID = -1


@dataclass
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
    """An integer id from a Kineto field (ints, integral floats or digit strings); -1 otherwise."""
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return _NO_ID


def load_kineto(path: str | os.PathLike[str], *, rank: int | None = None) -> KinetoTrace:
    """Read a Kineto trace JSON (plain or gzip)."""
    label = f"{path}" + (f" (rank {rank})" if rank is not None else "")
    doc = read_array_document(path, "traceEvents")
    header = doc.header
    if not doc.found:
        raise EtkitError(f"{label}: not a Kineto trace (no 'traceEvents' array)")
    names: dict[str, int] = {}
    cpu: list[tuple[int, float, float, int, int, int]] = []
    gpu: tuple[list, ...] = ([], [], [], [], [], [], [], [])
    launch: tuple[list, ...] = ([], [], [], [])
    threads: dict[int, str] = {}
    add_cpu = cpu.append
    for chunk in doc.chunks():
        for ev in chunk:
            if type(ev) is not dict:
                raise EtkitError(f"{label}: traceEvents holds a {type(ev).__name__}, not an object")
            cat = ev.get("cat")
            if cat in CPU_CATEGORIES:
                if ev.get("ph") == "X":  # _cpu_row inlined: one per host op
                    args = ev.get("args") or {}
                    tid = ev.get("tid")
                    rf, ext = args.get("Record function id", _NO_ID), args.get("External id", _NO_ID)
                    if not (int is type(tid) is type(rf) is type(ext)):
                        tid, rf, ext = _num(tid), _num(rf), _num(ext)
                    name = ev.get("name", "")
                    index = names.get(name)
                    if index is None:
                        index = names[name] = len(names)
                    add_cpu((index, float(ev.get("ts", 0.0)), float(ev.get("dur", 0.0)), tid, rf, ext))
            elif cat in GPU_CATEGORIES:
                args = ev.get("args") or {}
                gpu[0].append(names.setdefault(ev.get("name", ""), len(names)))
                gpu[1].append(float(ev.get("ts", 0.0)))
                gpu[2].append(float(ev.get("dur", 0.0)))
                gpu[3].append(_num(args.get("stream", ev.get("tid"))))
                gpu[4].append(_num(args.get("correlation", _NO_ID)))
                gpu[5].append(_num(args.get("External id", _NO_ID)))
                pg = args.get("Process Group Name")
                gpu[6].append(str(pg) if pg is not None else None)
                gpu[7].append(cat)
            elif cat in LAUNCH_CATEGORIES:
                args = ev.get("args") or {}
                launch[0].append(float(ev.get("ts", 0.0)))
                launch[1].append(_num(ev.get("tid")))
                launch[2].append(_num(args.get("correlation", _NO_ID)))
                launch[3].append(_num(args.get("External id", _NO_ID)))
            elif ev.get("ph") == "M" and ev.get("name") == "thread_name":
                tid = _num(ev.get("tid"))
                label_name = str((ev.get("args") or {}).get("name", ""))
                # Kineto may name a thread twice; a gloo worker name is the informative one.
                if tid not in threads or "gloo" in label_name:
                    threads[tid] = label_name
    cols = list(zip(*cpu)) if cpu else [()] * 6
    info = header.get("distributedInfo") or {}
    f64, i64 = np.float64, np.int64
    return KinetoTrace(
        str(path), info.get("rank"), info.get("world_size"), list(info.get("pg_config") or []),
        int(header.get("baseTimeNanoseconds") or 0), list(names),
        np.array(cols[0], dtype=i64), np.array(cols[1], dtype=f64), np.array(cols[2], dtype=f64),
        np.array(cols[3], dtype=i64), np.array(cols[4], dtype=i64), np.array(cols[5], dtype=i64),
        np.array(gpu[0], dtype=i64), np.array(gpu[1], dtype=f64), np.array(gpu[2], dtype=f64),
        np.array(gpu[3], dtype=i64), np.array(gpu[4], dtype=i64), np.array(gpu[5], dtype=i64), gpu[6], gpu[7],
        np.array(launch[0], dtype=f64), np.array(launch[1], dtype=i64), np.array(launch[2], dtype=i64),
        np.array(launch[3], dtype=i64), threads)
