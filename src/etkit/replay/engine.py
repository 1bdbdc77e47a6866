"""Replaying one rank: refine the plan with ATen ops and kernels, then walk the graph and time each node.

The walk follows the plan's topological order. Compute nodes run synchronously (ATen op or calibrated
kernel). Communication nodes are issued asynchronously; a node that depends on one waits for it, so
communication overlaps exactly the work the trace let it overlap, and is waited where the trace waited.
Sends are the exception: gloo and NCCL sends complete only when the peer has posted its receive, so a
send's dependents go on at once (as in ASTRA-sim) and the send is waited for at the end of the iteration;
otherwise the ``send -> recv`` chains of ring algorithms would deadlock.

For converted PyTorch traces the ctrl tree nests operators (``aten::linear`` calls ``aten::t`` and
``aten::addmm``). The outermost ATen op that can be rebuilt and has no communication below it is
replayed; its descendants are COVERED. Containers (``ProfilerStep#2``, autograd wrappers) are NOOPs whose
children carry the work. A compute node that cannot be rebuilt runs a kernel calibrated to its recorded
duration and is listed as emulated, with the reason.
"""

from __future__ import annotations

import gc
import time
from collections import Counter, defaultdict
from dataclasses import field
from typing import Any

import numpy as np
import torch

from ..format.attrs import get_str
from ..model.edges import ctrl_parent
from ..model.schedule import RankSchedule
from ..model.trace import Trace
from ..records import record
from .aten import OpCall, UnsupportedOp, parse_op_call, run_op_call
from .hosttime import blocked_us
from .kernels import KernelBank, KernelChoice
from .plan import ACTION_KIND, Action, RankReplayPlan, mark_ancestors, nearest_marked_ancestor
from .pool import TensorPool

__all__ = ["RankReplayer", "RankResult", "KindStat", "Deviation", "Unreplayed"]

TOP_DEVIATIONS = 10
_ATEN = int(Action.ATEN)
_HOST = int(Action.HOST)
_SEND = int(Action.SEND)
_KERNELS = frozenset({int(Action.KERNEL), int(Action.MEMORY)})
_COMMS = frozenset({int(Action.COLL), int(Action.SEND), int(Action.RECV)})
_IDLE = frozenset({int(Action.NOOP), int(Action.COVERED), int(Action.SKIP), int(Action.OFF)})


@record
class KindStat:
    nodes: int = 0
    trace_us: float = 0.0
    replay_us: float = 0.0


@record(frozen=True)
class Deviation:
    rank: int
    node_id: int
    name: str
    kind: str
    trace_us: float
    replay_us: float


@record(frozen=True)
class Unreplayed:
    """Nodes of one name left out (``skipped``) or run as a stand-in kernel (``emulated``), with why."""

    rank: int
    status: str
    reason: str
    name: str
    count: int
    node_ids: tuple[int, ...]


@record
class RankResult:
    rank: int
    nodes: int
    steps: int
    trace_iteration_us: float
    trace_time_basis: str
    iteration_us: list[float]
    kinds: dict[str, KindStat]
    deviations: list[Deviation]
    unreplayed: list[Unreplayed]
    calls: list[Any]
    schedule: RankSchedule | None = None  # last measured iteration, ns from its start (replayed rows ran)
    pool: dict[str, int] = field(default_factory=dict)
    dangling_deps: int = 0


def _spin_until(deadline_ns: int) -> None:
    """Busy-wait: host work occupies the CPU (a sleep would free it and wake up late)."""
    clock = time.perf_counter_ns
    while clock() < deadline_ns:
        pass


class RankReplayer:
    """Replays one rank's trace; ``communicator`` is ``None`` when the plan has no communication to issue."""

    def __init__(self, trace: Trace, plan: RankReplayPlan, pool: TensorPool, communicator: Any = None, *,
                 host_time: bool = True) -> None:
        self.trace = trace
        self.plan = plan
        self.pool = pool
        self.comm = communicator
        self.action = plan.action.copy()
        self.reasons: dict[int, tuple[str, str]] = {r: ("skipped", why) for r, why in plan.reasons.items()}
        self.op_calls: dict[int, OpCall] = {}
        self.kernels: dict[int, KernelChoice] = {}
        self.device = pool.device
        self.host_time = host_time
        self._bank: KernelBank | None = None  # calibrated on first use: traces without kernels skip it
        self.host_us = np.zeros(len(trace))  # busy-wait per HOST row
        self._refine_compute()
        self.trace_us = self._trace_times()

    # -- planning that needs PyTorch -------------------------------------------------------------

    def _refine_compute(self) -> None:
        trace, action = self.trace, self.action
        compute = np.flatnonzero(action == Action.KERNEL)
        if not len(compute):
            self._choose_kernels()
            return
        parent = ctrl_parent(trace)
        comm_rows = np.flatnonzero(np.isin(action, [Action.COLL, Action.SEND, Action.RECV, Action.SKIP]))
        has_comm_below = mark_ancestors(parent, comm_rows)
        has_children = mark_ancestors(parent, np.arange(len(trace)))
        aten_ok = np.zeros(len(trace), dtype=bool)
        failures: dict[int, str] = {}
        names = trace.strings
        for row in compute.tolist():
            name = names[int(trace.name_idx[row])]
            if not name.startswith("aten::") or has_comm_below[row]:
                continue
            node = trace.node(row)
            if not node.HasField("inputs"):
                continue
            try:
                self.op_calls[row] = parse_op_call(name, get_str(node.attr, "op_schema", "") or "",
                                                   node.inputs.values, node.inputs.shapes, node.inputs.types)
                aten_ok[row] = True
            except UnsupportedOp as exc:
                failures[row] = str(exc)
        covered = nearest_marked_ancestor(parent, aten_ok) >= 0
        replay_aten = aten_ok & ~covered
        action[replay_aten] = Action.ATEN
        action[covered & (action == Action.KERNEL)] = Action.COVERED
        # Containers: compute nodes with children and no op of their own. Their exclusive time is the
        # framework's work around the children (Python, autograd engine, hooks): spun when asked for.
        # CPU-op leaves that are not ATen ops (record_function ranges such as an optimizer's zero_grad)
        # and carry no work figures are framework time too; failed ATen ops stay compute (a kernel).
        containers = (action == Action.KERNEL) & has_children
        failed = np.zeros(len(trace), dtype=bool)
        failed[list(failures)] = True
        no_work = (trace.num_ops <= 0) & (trace.tensor_size <= 0)
        framework = containers | ((action == Action.KERNEL) & (trace.is_cpu_op == 1) & ~failed & no_work)
        action[framework] = Action.NOOP
        if self.host_time:
            # own time minus the waits for communication, which the walk reproduces by itself
            self.host_us = np.maximum(trace.duration.astype(np.float64) - blocked_us(trace), 0.0)
            action[framework & (self.host_us >= 1.0)] = Action.HOST
        for row in list(self.op_calls):
            if action[row] != Action.ATEN:
                del self.op_calls[row]
        for row, why in failures.items():
            if action[row] == Action.KERNEL:
                self.reasons[row] = ("emulated", why)
        self._choose_kernels()

    def _choose_kernels(self) -> None:
        rows = np.flatnonzero(np.isin(self.action, [Action.KERNEL, Action.MEMORY]))
        if not len(rows):
            return
        bank = self.bank
        trace = self.trace
        for row in rows.tolist():
            memory = self.action[row] == Action.MEMORY
            choice = bank.choose(0 if memory else int(max(trace.num_ops[row], 0)),
                                 int(max(trace.tensor_size[row], 0)), int(trace.duration[row]))
            if choice is None:
                self.action[row] = Action.NOOP  # records no work: nothing to replay
            else:
                self.kernels[row] = choice

    @property
    def bank(self) -> KernelBank:
        if self._bank is None:
            self._bank = KernelBank(self.pool)
        return self._bank

    def _trace_times(self) -> np.ndarray:
        """Trace time per row: inclusive of covered descendants for replayed ATen ops, without the waits
        for communication for host time."""
        trace = self.trace
        start = trace.start.astype(np.float64)
        dur = trace.duration.astype(np.float64)
        times = dur.copy()
        host = self.action == Action.HOST
        times[host] = self.host_us[host]
        aten = self.action == Action.ATEN
        if aten.any():
            owner = nearest_marked_ancestor(ctrl_parent(trace), aten)
            inside = owner >= 0
            if (trace.start > 0).any():
                end = start + dur
                np.maximum.at(end, owner[inside], end[inside])
                times[aten] = end[aten] - start[aten]
            else:
                np.add.at(times, owner[inside], dur[inside])
        return times

    # -- execution ---------------------------------------------------------------------------------

    def _now_ns(self) -> int:
        # On a GPU, wait for the compute stream only: collectives run on the backend's own streams and
        # keep overlapping; a node that waited on one has already put that wait into the compute stream.
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        return time.perf_counter_ns()

    def run_iteration(self, iteration: int) -> tuple[float, np.ndarray, np.ndarray]:
        """One pass over the graph; returns (wall µs, start ns, end ns per row, relative to the pass start).

        The loop compares plain ints (enum lookups cost more than small ops) and runs with the garbage
        collector paused, so a collection does not land inside a node's time.
        """
        n = len(self.trace)
        start = np.zeros(n, dtype=np.int64)
        end = np.zeros(n, dtype=np.int64)
        action = self.action.tolist()
        dep_ptr, dep_rows = self.plan.dep_ptr.tolist(), self.plan.dep_rows.tolist()
        pending: dict[int, tuple[Any, list[torch.Tensor], bool]] = {}
        if self.comm is not None:
            self.comm.iteration = iteration
        ids = self.trace.ids
        host_ns = (self.host_us * 1000).astype(np.int64).tolist()
        now = self._now_ns
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            t0 = now()
            for row in self.plan.order.tolist():
                if pending:
                    for dep in dep_rows[dep_ptr[row]:dep_ptr[row + 1]]:
                        entry = pending.get(dep)
                        if entry is not None and not entry[2]:
                            self._complete(dep, pending, end, t0, wait=True)
                a = action[row]
                if a in _IDLE:
                    continue
                s = now()
                start[row] = s - t0
                if a == _ATEN:
                    self._run_aten(row)
                elif a in _KERNELS:
                    self.bank.run(self.kernels[row])
                elif a == _HOST:
                    _spin_until(s + host_ns[row])
                else:
                    work, lent = self.comm.issue(int(ids[row]), self.plan.comm[row])
                    pending[row] = (work, lent, a == _SEND)
                if a not in _COMMS:
                    end[row] = now() - t0
                if pending:
                    for done in [r for r, (w, _, _) in pending.items() if w.is_completed()]:
                        self._complete(done, pending, end, t0, wait=False)
            for row in list(pending):
                self._complete(row, pending, end, t0, wait=True)
            total_ns = now() - t0
        finally:
            if gc_was_enabled:
                gc.enable()
        return total_ns / 1e3, start, end

    def _complete(self, row: int, pending: dict, end: np.ndarray, t0: int, *, wait: bool) -> None:
        work, lent, _ = pending.pop(row)
        if wait:
            work.wait()
        end[row] = self._now_ns() - t0
        self.comm.release(lent)

    def _run_aten(self, row: int) -> None:
        try:
            run_op_call(self.op_calls[row], self.pool)
        except (RuntimeError, TypeError, ValueError, IndexError) as exc:
            # The op could not run with stand-in tensors (ones and zeros may break an op's precondition):
            # from now on it runs a kernel of its recorded duration, and the report says why.
            message = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
            self.reasons[row] = ("emulated", f"op failed: {message}")
            del self.op_calls[row]
            choice = self.bank.choose(0, 0, int(self.trace_us[row]))
            if choice is None:
                self.action[row] = Action.NOOP
            else:
                self.action[row] = Action.KERNEL
                self.kernels[row] = choice
                self.bank.run(choice)

    # -- results -----------------------------------------------------------------------------------

    def kind_of(self, row: int) -> str:
        a = Action(int(self.action[row]))
        if a == Action.COLL:
            return f"collective:{self.plan.comm[row].kind}"
        return ACTION_KIND.get(a, a.name.lower())

    def replay(self, iterations: int, warmup: int, *, barrier: Any = None) -> RankResult:
        """Run ``warmup`` then ``iterations`` passes (a barrier before each) and summarise them."""
        n = len(self.trace)
        total = np.zeros(n, dtype=np.float64)
        times: list[float] = []
        last: tuple[np.ndarray, np.ndarray] | None = None
        for it in range(warmup + iterations):
            if barrier is not None:
                barrier()
            wall_us, start, end = self.run_iteration(it)
            if it >= warmup:
                times.append(wall_us)
                total += (end - start) / 1e3
                last = (start, end)
        mean = total / max(iterations, 1)
        result = RankResult(self.plan.rank, n, self.plan.steps, self.plan.trace_iteration_us, self.plan.trace_time_basis,
                            times, {}, [], self._unreplayed(), list(self.comm.calls) if self.comm else [],
                            pool={"allocations": self.pool.stats.allocations, "reuses": self.pool.stats.reuses,
                                  "allocated_bytes": self.pool.stats.allocated_bytes},
                            dangling_deps=self.plan.dangling_deps)
        replayed = np.isin(self.action, [Action.ATEN, Action.KERNEL, Action.MEMORY, Action.COLL, Action.SEND,
                                         Action.RECV, Action.HOST])
        rows = np.flatnonzero(replayed)
        kinds: dict[str, KindStat] = defaultdict(KindStat)
        for row in rows.tolist():
            stat = kinds[self.kind_of(row)]
            stat.nodes += 1
            stat.trace_us += float(self.trace_us[row])
            stat.replay_us += float(mean[row])
        result.kinds = dict(kinds)
        timed = rows[self.trace_us[rows] > 0]
        worst = timed[np.argsort(-np.abs(mean[timed] - self.trace_us[timed]), kind="stable")[:TOP_DEVIATIONS]]
        result.deviations = [Deviation(self.plan.rank, int(self.trace.ids[r]), self.trace.name(r), self.kind_of(r),
                                       float(self.trace_us[r]), float(mean[r])) for r in worst.tolist()]
        if last is not None:
            start, end = last
            result.schedule = RankSchedule(start.astype(np.float64), np.maximum(end, start).astype(np.float64), replayed)
        return result

    def _unreplayed(self) -> list[Unreplayed]:
        groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for row, (status, why) in sorted(self.reasons.items()):
            groups[(status, why, self.trace.name(row))].append(int(self.trace.ids[row]))
        counts = Counter({k: len(v) for k, v in groups.items()})
        return [Unreplayed(self.plan.rank, status, why, name, count, tuple(groups[(status, why, name)][:5]))
                for (status, why, name), count in counts.most_common()]
