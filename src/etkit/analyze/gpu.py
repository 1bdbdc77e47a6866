"""HTA's questions, answered on the ET: GPU time, idle time, kernels, overlap, launches, sequences, annotations.

Holistic Trace Analysis (HTA) answers these on Kineto traces; here they are computed from converted ETs
(``etkit convert kineto`` or ``convert pytorch``), which keep every GPU kernel, copy and set with its
stream, its measured ns times (``ts_ns``/``dur_ns``), its profiler category (``cat``) and the CUDA runtime
call that launched it. Definitions follow HTA 0.5.0 so the figures agree with it (``tests/analyze``
compares them on every GPU trace in shared data); where they differ, the difference is a definition
named here.

**The window** (as HTA loads a trace): with two or more ``ProfilerStep#`` ranges, the last step is left out
(``include_last_step`` keeps it): host events that start at or after the last step's start go, and so does
GPU activity whose launching runtime call goes or is not in the trace. With one step or none, everything is kept.

**GPU activity** is kernels, copies and sets (NCCL kernels are the COMM nodes that ran as them, named by
their ``kernel_name``), and the syncs Kineto records on a stream (``cuda_sync``: "Stream Wait Event",
"Stream Sync"), which HTA counts as GPU events too. Kernel types: communication (COMM nodes), memory
(copies and sets), computation (the other kernels); a sync is typed by HTA's name rule: "...Sync" is of no
type HTA reports (it is non-compute GPU time), any other (a "Stream Wait Event") computation. etkit's own
accounting counts a sync as neither (a stream waiting is not work; :mod:`.kinds`).

- :func:`temporal_breakdown`: per rank, over the first to last GPU activity (``kernel_ns``), ``idle`` (no
  GPU activity), ``compute`` (computation kernels) and ``non_compute`` (the rest): HTA's GPU-only view, beside
  etkit's whole-rank accounting (:mod:`etkit.model.accounting`, :func:`etkit.analyze.breakdown`).
- :func:`kernel_breakdown`: time per kernel type and type overlap, and per kernel name and rank the count,
  sum, max, min, mean and sample standard deviation, with each kernel's distribution over ranks.
- :func:`comm_comp_overlap`: per rank, the share of communication-kernel time under computation kernels.
- :func:`idle_time_breakdown`: per rank and stream, the gaps between consecutive activities, as HTA splits
  them: *host wait* (the next one was launched after the previous ended: the CPU was late), *kernel wait*
  (a gap under ``kernel_wait_ns``, HTA's ``consecutive_kernel_delay`` = 30 in its µs), *other*.
- :func:`launch_stats`: per launched kernel (``cudaLaunchKernel``/``cudaLaunchKernelExC``, and with
  ``include_memory_events`` ``cudaMemcpyAsync``/``cudaMemsetAsync``): the runtime call's duration, the
  kernel's, and the launch delay (kernel start minus the call's end, at least 0).
- :func:`frequent_kernel_sequences`: for the shallowest host ops whose name contains ``operator``, the
  kernels each launched (itself or through its callees), as patterns counted over the ops.
- :func:`annotation_breakdown`: per rank and user annotation (``record_function`` range; on the GPU with
  ``use_gpu``), count, sum, max, min, mean and standard deviation of its duration.

Every result has ``tables()`` (:mod:`.tables`: CSV files, ``to_pandas()``) and ``to_json()``.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

import numpy as np

from ..arrays import distinct, percentile
from ..format.attrs import PROFILER_CATEGORIES
from ..model.accounting import union_intervals, union_length
from ..model.edges import ctrl_parent
from ..model.job import Job
from ..model.schedule import Schedule
from ..model.trace import Trace
from ..records import record
from .context import AnalysisContext, RankView, prepare
from .kinds import COMM, MEMORY
from .tables import Table

__all__ = ["GpuRank", "gpu_ranks", "TemporalBreakdown", "temporal_breakdown", "KernelStats", "KernelBreakdown",
           "kernel_breakdown", "comm_comp_overlap", "IdleBreakdown", "idle_time_breakdown", "LaunchStats",
           "launch_stats", "KernelSequence", "frequent_kernel_sequences", "AnnotationStats", "annotation_breakdown",
           "KERNEL_TYPES", "LAUNCH_CALLS", "MEMORY_CALLS", "GpuAnalysis", "gpu_analysis", "has_gpu_activity"]

_CAT = {name: i for i, name in enumerate(PROFILER_CATEGORIES)}
_GPU_CATS = np.asarray([_CAT["kernel"], _CAT["gpu_memcpy"], _CAT["gpu_memset"], _CAT["cuda_sync"]])
_HOST_CATS = np.asarray([_CAT["cpu_op"], _CAT["user_annotation"], _CAT["cuda_runtime"], _CAT["cuda_driver"]])
_RUNTIME_CATS = np.asarray([_CAT["cuda_runtime"], _CAT["cuda_driver"]])
KERNEL_TYPES = ("COMMUNICATION", "MEMORY", "COMPUTATION", "OTHER")
#: Runtime calls that launch a kernel, and those that launch a copy or set (HTA's launch statistics).
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "runFunction - job_prep_and_submit_for_execution")
MEMORY_CALLS = ("cudaMemcpyAsync", "cudaMemsetAsync")


@record
class GpuRank:
    """One rank's GPU activity in the window: rows, ns times, streams, names, kernel types, launches."""

    rank: int
    view: RankView
    host: np.ndarray  # host rows (ops, annotations, runtime calls) in the window
    rows: np.ndarray  # GPU activity rows in the window, by start
    start: np.ndarray
    end: np.ndarray
    stream: np.ndarray
    names: list[str]
    ktype: np.ndarray  # index into KERNEL_TYPES
    launcher: np.ndarray  # the runtime call's row (-1: not in the trace)

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.start


def _kernel_names(trace: Trace, rows: np.ndarray, comm: np.ndarray) -> list[str]:
    """Names of GPU rows; a COMM node is named by the NCCL kernel it ran as (its ``kernel_name``)."""
    names = trace.names_of(rows)
    at = np.flatnonzero(comm)
    for i, kernel in zip(at.tolist(), trace.string_attr(rows[at], "kernel_name") if at.size else ()):
        if kernel is not None:
            names[i] = kernel
    return names


def _launchers(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Per GPU row, the runtime call that launched it: a kernel's ctrl dep; for a COMM node that ran as a
    kernel, the last runtime call it depends on (the launch comes right before it on its thread)."""
    from .timing import dependency_rows

    dst, src = dependency_rows(trace)
    is_gpu = np.zeros(len(trace), dtype=bool)
    is_gpu[rows] = True
    keep = is_gpu[dst] & np.isin(trace.cat[src], _RUNTIME_CATS)
    out = np.full(len(trace), -1, dtype=np.int64)
    d, s = dst[keep], src[keep]
    order = np.lexsort((trace.start[s], d))  # per GPU row, its runtime deps by start: the launch is the last
    d, s = d[order], s[order]
    last = np.ones(len(d), dtype=bool)
    last[:-1] = d[1:] != d[:-1]
    out[d[last]] = s[last]
    parent = ctrl_parent(trace)[rows]  # a kernel's launch is its ctrl parent
    launched = (parent >= 0) & np.isin(trace.cat[np.maximum(parent, 0)], _RUNTIME_CATS)
    result = out[rows]
    result[launched] = parent[launched]
    return result


def _window(view: RankView, include_last_step: bool) -> tuple[np.ndarray, np.ndarray]:
    """Host rows and GPU rows HTA keeps (see the module docstring)."""
    trace, sched = view.trace, view.sched
    cat = trace.cat
    host = sched.ran & np.isin(cat, _HOST_CATS)
    gpu = sched.ran & np.isin(cat, _GPU_CATS) & (trace.stream >= 0)
    is_step = np.asarray(["ProfilerStep" in s for s in trace.strings], dtype=bool)
    steps = np.flatnonzero(host & is_step[trace.name_idx]) if len(trace) else np.zeros(0, dtype=np.int64)
    if len(steps) < 2:
        return np.flatnonzero(host), np.flatnonzero(gpu)
    if include_last_step:
        host &= sched.start_ns <= sched.end_ns[steps].max()
    else:
        host &= sched.start_ns < sched.start_ns[steps].max()
    rows = np.flatnonzero(gpu)
    launch = _launchers(trace, rows)
    kept = launch >= 0
    kept[kept] = host[launch[kept]]
    return np.flatnonzero(host), rows[kept]


def gpu_ranks(ctx: AnalysisContext, *, include_last_step: bool = False) -> dict[int, GpuRank]:
    """The GPU activity of every rank of ``ctx`` in HTA's window (computed once per context)."""
    key = ("gpu_ranks", include_last_step)
    if key not in ctx.cache:
        ctx.cache[key] = _gpu_ranks(ctx, include_last_step)
    return ctx.cache[key]


def _gpu_ranks(ctx: AnalysisContext, include_last_step: bool) -> dict[int, GpuRank]:
    out = {}
    for rank, view in sorted(ctx.views.items()):
        trace, sched = view.trace, view.sched
        host, rows = _window(view, include_last_step)
        rows = rows[np.lexsort((rows, sched.start_ns[rows]))]
        comm = view.kinds[rows] == COMM
        ktype = np.where(comm, 0, np.where(view.kinds[rows] == MEMORY, 1, 2)).astype(np.int8)
        # a sync on a stream: HTA's name rule (a name ending in "Sync" is no kernel type it reports, the rest
        # computation: a "Stream Wait Event" counts as compute there)
        sync = trace.cat[rows] == _CAT["cuda_sync"]
        ktype[sync] = [3 if trace.name(r).endswith("Sync") else 2 for r in rows[sync].tolist()]
        out[rank] = GpuRank(rank, view, host, rows, sched.start_ns[rows], sched.end_ns[rows],
                            trace.stream[rows].astype(np.int64), _kernel_names(trace, rows, comm), ktype,
                            _launchers(trace, rows))
    return out


def _context(job: Job, schedule: Schedule | None, context: AnalysisContext | None) -> AnalysisContext:
    return prepare(job, schedule, context=context)


# -- temporal breakdown -------------------------------------------------------------------------------


@record
class TemporalRank:
    rank: int
    kernel_ns: int  # first GPU activity's start to the last one's end
    idle_ns: int
    compute_ns: int
    non_compute_ns: int

    def pct(self, what: str) -> float:
        return 100.0 * getattr(self, f"{what}_ns") / self.kernel_ns if self.kernel_ns else 0.0


@record
class TemporalBreakdown:
    ranks: list[TemporalRank]

    def to_json(self) -> dict:
        return {"ranks": [r.__dict__ | {"idle_pct": r.pct("idle"), "compute_pct": r.pct("compute"),
                                        "non_compute_pct": r.pct("non_compute")} for r in self.ranks]}

    def tables(self) -> list[Table]:
        return [Table("gpu_temporal_breakdown", ["rank", "kernel_ns", "idle_ns", "compute_ns", "non_compute_ns",
                                                  "idle_pct", "compute_pct", "non_compute_pct"],
                      [[r.rank, r.kernel_ns, r.idle_ns, r.compute_ns, r.non_compute_ns, r.pct("idle"),
                        r.pct("compute"), r.pct("non_compute")] for r in self.ranks])]


def temporal_breakdown(job: Job, schedule: Schedule | None = None, *, include_last_step: bool = False,
                       context: AnalysisContext | None = None) -> TemporalBreakdown:
    """HTA's GPU-only temporal breakdown per rank (see the module docstring)."""
    out = []
    for g in gpu_ranks(_context(job, schedule, context), include_last_step=include_last_step).values():
        if not len(g.rows):
            out.append(TemporalRank(g.rank, 0, 0, 0, 0))
            continue
        s, e = union_intervals(g.start, g.end)
        kernel = int(e.max() - s.min()) if len(s) else 0
        busy = int((e - s).sum())
        comp = g.ktype == 2
        compute = union_length(g.start[comp], g.end[comp])
        out.append(TemporalRank(g.rank, kernel, kernel - busy, compute, busy - compute))
    return TemporalBreakdown(out)


# -- kernel breakdown ---------------------------------------------------------------------------------


@record
class KernelStats:
    rank: int
    name: str
    kernel_type: str
    count: int
    sum_ns: int
    max_ns: int
    min_ns: int
    mean_ns: float
    std_ns: float  # sample standard deviation (0 for one kernel), as pandas computes it


@record
class KernelBreakdown:
    by_type: dict[str, int]  # kernel type (and "A overlapping B") -> ns summed over ranks
    kernels: list[KernelStats]  # per rank and kernel name, largest sum first

    def distribution(self) -> dict[str, tuple[int, float, int]]:
        """Per kernel name: (min, median, max) over ranks of its summed time (ns)."""
        per: dict[str, list[int]] = {}
        for k in self.kernels:
            per.setdefault(k.name, []).append(k.sum_ns)
        return {n: (min(v), float(np.median(v)), max(v)) for n, v in per.items()}

    def to_json(self, limit: int = 500) -> dict:
        dist = self.distribution()
        return {"by_type": self.by_type, "kernels": [k.__dict__ for k in self.kernels[:limit]],
                "distribution": [{"name": n, "min_ns": a, "median_ns": b, "max_ns": c}
                                 for n, (a, b, c) in sorted(dist.items(), key=lambda kv: -kv[1][2])[:limit]]}

    def tables(self) -> list[Table]:
        total = sum(self.by_type.values()) or 1
        dist = self.distribution()
        return [Table("gpu_kernel_types", ["kernel_type", "sum_ns", "percentage"],
                      [[k, v, 100.0 * v / total] for k, v in sorted(self.by_type.items(), key=lambda kv: -kv[1])]),
                Table("gpu_kernels", ["rank", "name", "kernel_type", "count", "sum_ns", "max_ns", "min_ns", "mean_ns",
                                      "std_ns"], [list(k.__dict__.values()) for k in self.kernels]),
                Table("gpu_kernel_distribution", ["name", "min_rank_sum_ns", "median_rank_sum_ns", "max_rank_sum_ns"],
                      [[n, a, b, c] for n, (a, b, c) in sorted(dist.items(), key=lambda kv: -kv[1][2])])]


#: HTA names a combination of kernel types in this order: computation, communication, memory.
_LABEL_ORDER = (2, 0, 1)


def _type_overlaps(g: GpuRank, whole_us: bool = False) -> dict[str, int]:
    """Time (ns) each combination of kernel types ran together, HTA's ``kernel_type`` table (``whole_us``:
    each piece truncated to whole µs, as HTA's table does)."""
    times, deltas = [], []
    for t in range(3):  # HTA's kernel types (not OTHER)
        s, e = union_intervals(g.start[g.ktype == t], g.end[g.ktype == t])
        times += [s, e]
        deltas += [np.full(len(s), 1 << t), np.full(len(e), -(1 << t))]
    if not times:
        return {}
    time, delta = np.concatenate(times), np.concatenate(deltas)
    order = np.argsort(time, kind="stable")
    time, running = time[order], np.cumsum(delta[order])
    span = np.diff(time)
    if whole_us:
        span = span // 1000 * 1000
    out: dict[str, int] = {}
    for state in distinct(running[:-1]).tolist():
        if state <= 0:
            continue
        label = " overlapping ".join(KERNEL_TYPES[t] for t in _LABEL_ORDER if state & (1 << t))
        out[label] = out.get(label, 0) + int(span[running[:-1] == state].sum())
    return out


def kernel_breakdown(job: Job, schedule: Schedule | None = None, *, include_last_step: bool = False,
                     whole_us: bool = False, context: AnalysisContext | None = None) -> KernelBreakdown:
    """Time per kernel type and per kernel (see the module docstring). ``whole_us``: the type table as HTA
    computes it, every piece of it truncated to whole µs (HTA's ``astype(int)``)."""
    by_type: dict[str, int] = {}
    kernels: list[KernelStats] = []
    for g in gpu_ranks(_context(job, schedule, context), include_last_step=include_last_step).values():
        for k, v in _type_overlaps(g, whole_us).items():
            by_type[k] = by_type.get(k, 0) + v
        if not len(g.rows):
            continue
        names, inverse = np.unique(np.asarray(g.names, dtype=object), return_inverse=True)
        dur = g.dur
        for i, name in enumerate(names.tolist()):
            if int(g.ktype[inverse == i][0]) == 3:
                continue  # HTA lists kernels of its three types only
            d = dur[inverse == i]
            std = float(np.std(d, ddof=1)) if len(d) > 1 else 0.0
            kernels.append(KernelStats(g.rank, name, KERNEL_TYPES[int(g.ktype[inverse == i][0])], len(d),
                                       int(d.sum()), int(d.max()), int(d.min()), float(d.mean()), std))
    kernels.sort(key=lambda k: (-k.sum_ns, k.rank, k.name))
    return KernelBreakdown(by_type, kernels)


# -- communication / computation overlap ----------------------------------------------------------------


def comm_comp_overlap(job: Job, schedule: Schedule | None = None, *, include_last_step: bool = False,
                      context: AnalysisContext | None = None) -> dict[int, float]:
    """Per rank: communication-kernel time under computation kernels / communication-kernel time (0..1)."""
    out = {}
    for g in gpu_ranks(_context(job, schedule, context), include_last_step=include_last_step).values():
        comm, comp = g.ktype == 0, g.ktype == 2
        c = union_length(g.start[comm], g.end[comm])
        both = union_length(np.concatenate((g.start[comm], g.start[comp])), np.concatenate((g.end[comm], g.end[comp])))
        overlap = c + union_length(g.start[comp], g.end[comp]) - both
        out[g.rank] = overlap / c if c else 0.0
    return out


# -- idle time ----------------------------------------------------------------------------------------


@record
class IdleBreakdown:
    rows: list[tuple[int, int, str, int, float]]  # rank, stream, category, idle ns, share of the stream's idle
    kernel_wait_ns: int

    def to_json(self) -> dict:
        return {"kernel_wait_ns": self.kernel_wait_ns,
                "streams": [{"rank": r, "stream": s, "category": c, "idle_ns": t, "ratio": x}
                            for r, s, c, t, x in self.rows]}

    def tables(self) -> list[Table]:
        return [Table("gpu_idle_time", ["rank", "stream", "idle_category", "idle_ns", "idle_ratio"],
                      [list(r) for r in self.rows])]


def idle_time_breakdown(job: Job, schedule: Schedule | None = None, *, ranks: list[int] | None = None,
                        kernel_wait_ns: int = 30_000, include_last_step: bool = False,
                        context: AnalysisContext | None = None) -> IdleBreakdown:
    """Per rank and stream: idle time between activities, by cause (see the module docstring)."""
    out = []
    for g in gpu_ranks(_context(job, schedule, context), include_last_step=include_last_step).values():
        if ranks is not None and g.rank not in ranks:
            continue
        launch_ts = np.where(g.launcher >= 0, g.view.sched.start_ns[np.maximum(g.launcher, 0)], np.iinfo(np.int64).min)
        kernels = g.view.trace.cat[g.rows] != _CAT["cuda_sync"]  # HTA leaves syncs out of idle time
        for stream in sorted(set(g.stream[kernels].tolist())):
            sel = np.flatnonzero((g.stream == stream) & kernels)
            sel = sel[np.argsort(g.start[sel], kind="stable")]
            gap = g.start[sel][1:] - g.end[sel][:-1]
            host = launch_ts[sel][1:] > g.end[sel][:-1]
            kernel = ~host & (gap < kernel_wait_ns)
            cats = {"host_wait": int(gap[host].sum()), "kernel_wait": int(gap[kernel].sum()),
                    "other": int(gap[~host & ~kernel].sum())}
            total = sum(cats.values())
            for name, t in cats.items():
                if name == "other" or (host if name == "host_wait" else kernel).any():
                    out.append((g.rank, stream, name, t, t / total if total else 0.0))
    return IdleBreakdown(out, kernel_wait_ns)


# -- launch statistics ---------------------------------------------------------------------------------


@record
class LaunchStats:
    """Per rank, per launched kernel: the runtime call's duration, the kernel's, and the launch delay (ns)."""

    cpu_ns: dict[int, np.ndarray]
    gpu_ns: dict[int, np.ndarray]
    delay_ns: dict[int, np.ndarray]

    def summary(self) -> list[list]:
        rows = []
        for r in sorted(self.cpu_ns):
            for what, v in (("cpu_duration", self.cpu_ns[r]), ("gpu_duration", self.gpu_ns[r]),
                            ("launch_delay", self.delay_ns[r])):
                if len(v):
                    rows.append([r, what, len(v), int(v.sum()), float(v.mean()), float(np.median(v)),
                                 percentile(v, 95), int(v.max())])
                else:
                    rows.append([r, what, 0, 0, 0.0, 0.0, 0.0, 0])
        return rows

    def to_json(self) -> dict:
        head = ("rank", "what", "count", "sum_ns", "mean_ns", "median_ns", "p95_ns", "max_ns")
        return {"summary": [dict(zip(head, row)) for row in self.summary()]}

    def tables(self) -> list[Table]:
        return [Table("gpu_launch_stats", ["rank", "what", "count", "sum_ns", "mean_ns", "median_ns", "p95_ns", "max_ns"],
                      self.summary()),
                Table("gpu_launches", ["rank", "cpu_duration_ns", "gpu_duration_ns", "launch_delay_ns"],
                      [[r, c, g, d] for r in sorted(self.cpu_ns)
                       for c, g, d in zip(*(_ints(ns[r]) for ns in (self.cpu_ns, self.gpu_ns, self.delay_ns)))])]


def _ints(values: np.ndarray) -> list[int]:
    """``[int(v) for v in values]`` at numpy's speed (int() truncates toward zero, as the cast does)."""
    return np.asarray(values).astype(np.int64).tolist()  # type: ignore[no-any-return]


def launch_stats(job: Job, schedule: Schedule | None = None, *, include_memory_events: bool = True,
                 include_last_step: bool = False, context: AnalysisContext | None = None) -> LaunchStats:
    """CUDA launch statistics per rank (see the module docstring)."""
    calls = set(LAUNCH_CALLS) | (set(MEMORY_CALLS) if include_memory_events else set())
    cpu, gpu, delay = {}, {}, {}
    for g in gpu_ranks(_context(job, schedule, context), include_last_step=include_last_step).values():
        trace, sched = g.view.trace, g.view.sched
        ok = g.launcher >= 0
        if ok.any():
            launch_names = np.fromiter(map(calls.__contains__, trace.names_of(g.launcher[ok])), dtype=bool,
                                       count=int(ok.sum()))
            ok[ok] = launch_names
        l_start, l_end = sched.start_ns[g.launcher[ok]], sched.end_ns[g.launcher[ok]]
        cpu[g.rank] = l_end - l_start
        gpu[g.rank] = g.dur[ok]
        delay[g.rank] = np.maximum(g.start[ok] - l_end, 0)
    return LaunchStats(cpu, gpu, delay)


# -- frequent kernel sequences ------------------------------------------------------------------------


@record
class KernelSequence:
    pattern: str  # "op|kernel|kernel..."
    count: int
    gpu_ns: int  # kernels' time, summed over the occurrences
    cpu_ns: int  # the ops' time, summed


def frequent_kernel_sequences(job: Job, operator: str, schedule: Schedule | None = None, *, rank: int = 0,
                              min_pattern_len: int = 3, top_k: int = 5, include_last_step: bool = False,
                              context: AnalysisContext | None = None) -> list[KernelSequence]:
    """The most frequent kernel sequences launched by ops named like ``operator`` (see the module docstring)."""
    g = gpu_ranks(_context(job, schedule, context), include_last_step=include_last_step)[rank]
    trace = g.view.trace
    parent = ctrl_parent(trace)
    host = np.zeros(len(trace), dtype=bool)
    host[g.host] = True
    depth = np.zeros(len(trace), dtype=np.int64)
    cur = parent.copy()
    for _ in range(1000):
        live = cur >= 0
        if not live.any():
            break
        depth[live] += 1
        cur[live] = parent[cur[live]]
    match = np.asarray([operator in s for s in trace.strings], dtype=bool)[trace.name_idx] & host & \
        (trace.cat != _CAT["cuda_runtime"]) & (trace.cat != _CAT["cuda_driver"])
    # each GPU activity belongs to every op above its launch
    owner_of: dict[int, list[int]] = {}
    for i, launch in enumerate(g.launcher.tolist()):
        r = launch
        while r >= 0:
            if match[r]:
                owner_of.setdefault(r, []).append(i)
            r = int(parent[r])
    candidates = np.flatnonzero(match)
    if not len(candidates):
        return []
    shallowest = depth[candidates].min()
    counts: dict[tuple[str, ...], list[int]] = {}
    for op in candidates[depth[candidates] == shallowest].tolist():
        acts = owner_of.get(op, [])
        if len(acts) < min_pattern_len:
            continue
        acts.sort(key=lambda i: g.start[i])
        key = (trace.name(op), *[g.names[i] for i in acts])
        entry = counts.setdefault(key, [0, 0, 0])
        entry[0] += 1
        entry[1] += int(sum(g.dur[i] for i in acts))
        entry[2] += int(g.view.sched.end_ns[op] - g.view.sched.start_ns[op])
    found = [KernelSequence("|".join(k), *v) for k, v in counts.items()]
    found.sort(key=lambda s: (-s.count, s.pattern))
    return found[:top_k] if top_k else found


# -- user annotations ----------------------------------------------------------------------------------


@record
class AnnotationStats:
    rank: int
    name: str
    count: int
    sum_ns: int
    max_ns: int
    min_ns: int
    mean_ns: float
    std_ns: float


@record
class AnnotationBreakdown:
    rows: list[AnnotationStats] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"annotations": [a.__dict__ for a in self.rows]}

    def tables(self) -> list[Table]:
        return [Table("user_annotations", ["rank", "name", "count", "sum_ns", "max_ns", "min_ns", "mean_ns", "std_ns"],
                      [list(a.__dict__.values()) for a in self.rows])]


def annotation_breakdown(job: Job, schedule: Schedule | None = None, *, use_gpu: bool = False,
                         include_last_step: bool = False, context: AnalysisContext | None = None) -> AnnotationBreakdown:
    """Time per user annotation and rank: CPU ``record_function`` ranges, or with ``use_gpu`` their GPU ranges."""
    ctx = _context(job, schedule, context)
    out = []
    for g in gpu_ranks(ctx, include_last_step=include_last_step).values():
        trace, sched = g.view.trace, g.view.sched
        if use_gpu:
            rows = np.flatnonzero(sched.ran & (trace.cat == _CAT["gpu_user_annotation"]))
        else:
            rows = g.host[trace.cat[g.host] == _CAT["user_annotation"]]
        if not len(rows):
            continue
        dur = sched.end_ns[rows] - sched.start_ns[rows]
        names, inverse = np.unique(np.asarray(trace.names_of(rows), dtype=object), return_inverse=True)
        for i, name in enumerate(names.tolist()):
            d = dur[inverse == i]
            out.append(AnnotationStats(g.rank, name, len(d), int(d.sum()), int(d.max()), int(d.min()), float(d.mean()),
                                       float(np.std(d, ddof=1)) if len(d) > 1 else 0.0))
    out.sort(key=lambda a: (a.rank, a.name))
    return AnnotationBreakdown(out)


# -- all of them at once --------------------------------------------------------------------------------


@record
class GpuAnalysis:
    """The GPU questions :func:`etkit.analyze.analyze_job` answers when a job has GPU activity."""

    temporal: TemporalBreakdown
    kernels: KernelBreakdown
    overlap: dict[int, float]
    idle: IdleBreakdown
    launches: LaunchStats
    annotations: AnnotationBreakdown

    def to_json(self) -> dict:
        return {"temporal": self.temporal.to_json(), "kernels": self.kernels.to_json(),
                "comm_comp_overlap": {str(r): v for r, v in sorted(self.overlap.items())},
                "idle": self.idle.to_json(), "launches": self.launches.to_json(),
                "annotations": self.annotations.to_json()}

    def tables(self) -> list[Table]:
        return (self.temporal.tables() + self.kernels.tables() +
                [Table("gpu_comm_comp_overlap", ["rank", "overlap_ratio"], [[r, v] for r, v in sorted(self.overlap.items())])]
                + self.idle.tables() + self.launches.tables() + self.annotations.tables())


def has_gpu_activity(ctx: AnalysisContext) -> bool:
    """Whether any rank has GPU kernels, copies or sets (a converted GPU profile)."""
    return any(bool(np.isin(v.trace.cat, _GPU_CATS).any()) for v in ctx.views.values())


def gpu_analysis(job: Job, schedule: Schedule | None = None, *, include_last_step: bool = False,
                 context: AnalysisContext | None = None) -> GpuAnalysis | None:
    """Every GPU analysis of ``job`` (None when it has no GPU activity)."""
    ctx = _context(job, schedule, context)
    if not has_gpu_activity(ctx):
        return None
    kw: dict[str, Any] = {"include_last_step": include_last_step, "context": ctx}
    return GpuAnalysis(temporal_breakdown(job, **kw), kernel_breakdown(job, **kw), comm_comp_overlap(job, **kw),
                       idle_time_breakdown(job, **kw), launch_stats(job, **kw), annotation_breakdown(job, **kw))
