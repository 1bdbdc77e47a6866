"""One rank of ``etkit anonymize``: the executor tasks that survey a rank file and rewrite it.

:func:`survey_rank` reads the columns only (what the job-wide choices need: the earliest timestamp,
the process-group names in use, the groups declared by METADATA nodes). :func:`rewrite_rank` writes
the anonymised rank through :class:`~etkit.format.stream.TraceWriter` and returns the input's strings
(for the leak search) and counts. Each task holds one rank at a time.

Every output node is built from the policy: its id, type, dependencies and (shifted, jittered) timing;
its class as name; the kept attributes from the trace's columns (in their canonical kinds); its IOInfo
rewritten by :class:`~etkit.anonymize.ioinfo.IoRewriter`. Nothing of the input record is copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import orjson

from .. import __version__
from ..format.attrs import make_attr
from ..format.schema import GlobalMetadata, Node, NodeType
from ..format.stream import TraceWriter
from ..model.groups import parse_process_group_init
from ..model.job import groups_from_trace
from ..model.trace import MISSING, Trace, load_trace
from .ioinfo import IoRewriter, parse_shapes, quoted_strings
from .leaks import text_strings
from .opclass import GEMM_CLASSES, node_class
from .policy import HOT_ATTRIBUTES, Policy

__all__ = ["RankSurvey", "survey_rank", "RankTask", "RankOutcome", "rewrite_rank", "PRODUCER", "VOCABULARY"]

#: The ``producer`` of an anonymised trace's GlobalMetadata.
PRODUCER = f"etkit {__version__} anonymize"


@dataclass(frozen=True)
class RankSurvey:
    rank: int
    nodes: int
    first_start_us: int | None  # earliest non-zero start_time_micros
    first_ts_ns: int | None  # earliest ts_ns attribute
    pg_names: frozenset[str]
    declared: dict[str, tuple[int, ...]]  # groups declared by METADATA nodes


def survey_rank(item: tuple[int, str]) -> RankSurvey:
    """Executor task: what the job-wide choices need from one rank file."""
    rank, path = item
    trace = load_trace(path)
    timed = trace.start[trace.start > 0]
    ts = trace.ts_ns[(trace.ts_ns != MISSING) & (trace.ts_ns > 0)] if hasattr(trace, "ts_ns") else np.empty(0)
    names = frozenset(trace.strings[i] for i in np.unique(trace.pg_idx[trace.pg_idx >= 0]).tolist())
    return RankSurvey(rank, len(trace), int(timed.min()) if timed.size else None, int(ts.min()) if ts.size else None,
                      names, dict(groups_from_trace(trace).groups))


@dataclass(frozen=True)
class RankTask:
    """What one rewrite task needs (small and picklable)."""

    rank: int
    source: str
    target: str
    policy: Policy
    shift_us: int  # subtracted from every non-zero start_time_micros
    shift_ns: int  # subtracted from every ts_ns
    pg_map: dict[str, str]  # old pg_name -> new


@dataclass
class RankOutcome:
    rank: int
    nodes: int
    strings: set[str] = field(default_factory=set)  # the input's text strings (for the leak search)
    tensors: int = 0  # distinct tensors renumbered
    flops_derived: int = 0  # nodes that got num_ops from their shapes
    max_jitter: float = 0.0  # largest relative change of a duration


#: Words etkit writes whatever the input: attribute names, classes, devices, the producer. A string of the
#: input that is one of these (or inside one) is reported as vocabulary, not as a leak.
VOCABULARY: tuple[str, ...] = ("pg_name", "ranks", PRODUCER, "producer", "None")


def _attr_bytes(cache: dict, name: str, value: int | str | bool) -> bytes:
    """The encoded ``attr`` field of ``name`` = ``value`` (canonical kind), made by protobuf and cached."""
    key = (name, value)
    out = cache.get(key)
    if out is None:
        out = Node(attr=[make_attr(name, value)]).SerializeToString()
        if len(cache) < 1 << 16:
            cache[key] = out
    return out


def _jitter_factors(policy: Policy, rank: int, n: int) -> np.ndarray | None:
    if policy.jitter <= 0.0:
        return None
    return np.random.default_rng([policy.seed, rank]).uniform(-policy.jitter, policy.jitter, n)


def _jittered(values: np.ndarray, noise: np.ndarray | None) -> np.ndarray:
    """``values + trunc(values * noise)``: never more than ``|noise|`` relative change, integer as before."""
    if noise is None:
        return values
    v = values.astype(np.int64)
    return (v + np.trunc(v * noise).astype(np.int64)).astype(values.dtype)


def _pow2(values: np.ndarray) -> np.ndarray:
    """Every positive value rounded up to a power of two (MISSING and 0 stay)."""
    out = values.copy()
    pos = values > 0
    out[pos] = np.left_shift(1, np.ceil(np.log2(values[pos].astype(np.float64))).astype(np.int64))
    # float log2 can round a value just above a power of two down: fix those
    low = pos & (out < values)
    out[low] <<= 1
    return out


def _metadata(trace: Trace, policy: Policy) -> GlobalMetadata:
    if policy.metadata == "keep":
        return trace.metadata
    meta = GlobalMetadata(version=trace.metadata.version)
    meta.attr.append(make_attr("producer", PRODUCER))
    return meta


def _leaf_rows(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """``rows`` that are not the ctrl parent of another row of ``rows`` (``aten::linear`` holds ``aten::addmm``:
    only the inner op's FLOPs count, or a sum over nodes would count them twice)."""
    if not rows.size:
        return rows
    member = np.zeros(len(trace), dtype=bool)
    member[rows] = True
    children = trace.edge_sources("ctrl")
    parents = trace.rows_of(trace.ctrl_deps)
    holds = np.zeros(len(trace), dtype=bool)
    ok = (parents >= 0) & member[children]
    holds[parents[ok]] = True
    return rows[~holds[rows]]


def _gemm_flops(name: str, cls: str, inputs: list | None, outputs: list | None) -> int | None:
    """FLOPs of a matrix product or convolution from its operands' shapes (None when they do not say)."""
    if not inputs or not outputs or not isinstance(outputs[0], list) or not outputs[0]:
        return None
    out = outputs[0]
    if not all(isinstance(d, int) for d in out):
        return None
    lower = name.lower()
    if cls == "conv":
        weight = inputs[1] if len(inputs) > 1 else None
        if not isinstance(weight, list) or len(weight) < 3 or not all(isinstance(d, int) for d in weight):
            return None
        return 2 * math.prod(out) * math.prod(weight[1:])
    a = inputs[1] if ("addmm" in lower or "baddbmm" in lower or "addmv" in lower) and len(inputs) > 2 else inputs[0]
    if not isinstance(a, list) or not a or not all(isinstance(d, int) for d in a):
        return None
    return 2 * math.prod(out) * a[-1]


def _group_init_values(text: str, pg_map: dict[str, str]) -> str:
    """A ``process_group:init`` values text with the groups renamed and nothing but names and ranks kept."""
    groups = parse_process_group_init(text).groups
    entries = [{"pg_name": pg_map.get(name, name), "ranks": list(ranks)} for name, ranks in groups.items()]
    return str([orjson.dumps(entries).decode()])


class _RankWriter:
    """Builds the anonymised nodes of one rank."""

    def __init__(self, task: RankTask, trace: Trace) -> None:
        self.task, self.trace, self.policy = task, trace, task.policy
        self.io = IoRewriter(self.policy.tensors, self.policy.shapes, self.policy.types)
        self.attrs: dict = {}
        self.outcome = RankOutcome(task.rank, len(trace))

    def class_names(self) -> list[str]:
        """The new name of every string of the trace's name table, per node type seen with it."""
        trace, policy = self.trace, self.policy
        if policy.names == "keep":
            return list(trace.strings)
        return [s if policy.keeps_name(s) else "" for s in trace.strings]

    def timing(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        trace, policy, task = self.trace, self.policy, self.task
        noise = _jitter_factors(policy, task.rank, len(trace))
        start = trace.start.astype(np.int64)
        if policy.timestamps == "drop":
            start = np.zeros_like(start)
        elif policy.timestamps == "shift":
            start = np.where(start > 0, start - task.shift_us, 0)
        duration = _jittered(trace.duration.astype(np.int64), noise)
        if noise is not None:
            d = trace.duration.astype(np.float64)
            changed = d > 0
            if changed.any():
                self.outcome.max_jitter = float(np.max(np.abs(duration[changed] - d[changed]) / d[changed]))
        ts = dur = None
        if hasattr(trace, "ts_ns"):
            ts = trace.ts_ns.copy()
            have = ts != MISSING
            if policy.timestamps == "drop":
                ts[:] = MISSING
            elif policy.timestamps == "shift":
                ts[have] = ts[have] - task.shift_ns
            dur = trace.dur_ns.copy()
            have = dur != MISSING
            dur[have] = _jittered(dur[have], None if noise is None else noise[have])
        return start, duration, ts, dur

    def int_columns(self, ts: np.ndarray | None, dur: np.ndarray | None) -> list[tuple[str, list[int]]]:
        """The kept integer attributes, as Python lists (MISSING where a node lacks it), in output order."""
        trace, policy = self.trace, self.policy
        comm = np.isin(trace.types, (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE))
        out = []
        for name in ("num_ops", "tensor_size", "comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag",
                     "comm_priority", "tid", "stream", "ts_ns", "dur_ns"):
            if not policy.keeps(name):
                continue
            if name == "ts_ns":
                col = ts
            elif name == "dur_ns":
                col = dur
            else:
                col = getattr(trace, name, None)
            if col is None:
                continue
            if policy.comm_sizes == "pow2" and (name == "comm_size" or (name == "tensor_size")):
                col = np.where(comm, _pow2(col), col) if name == "tensor_size" else _pow2(col)
            if (col != MISSING).any():
                out.append((name, col.tolist()))
        return out

    def derived_flops(self, names: list[str], classes: list[str], shapes: dict[int, tuple[str, str]]) -> dict[int, int]:
        """num_ops for leaf GEMM/convolution rows without one, from the shapes of their IOInfo."""
        if self.policy.flops != "derive":
            return {}
        trace = self.trace
        wanted = np.asarray([c in GEMM_CLASSES or c == "conv" for c in classes], dtype=bool)
        comp = trace.types == NodeType.COMP_NODE
        rows = np.flatnonzero(comp & wanted[trace.name_idx] & (trace.num_ops == MISSING))
        # the ops that are the compute: device ones where the rank has them, else the host's
        device = comp & (trace.is_cpu_op != 1)
        rows = rows[trace.is_cpu_op[rows] != 1] if device.any() else rows
        out = {}
        for row in _leaf_rows(trace, rows).tolist():
            if row not in shapes:
                continue
            name = names[int(trace.name_idx[row])]
            cls = classes[int(trace.name_idx[row])]
            flops = _gemm_flops(name, cls.removesuffix("_backward"), parse_shapes(shapes[row][0]), parse_shapes(shapes[row][1]))
            if flops is not None and flops > 0:
                out[row] = flops
        self.outcome.flops_derived = len(out)
        return out

    def run(self) -> RankOutcome:  # noqa: C901 - one pass over the nodes, kept together for speed
        trace, policy, task = self.trace, self.policy, self.task
        strings = self.outcome.strings
        strings.update(trace.strings)
        names = list(trace.strings)
        kept = self.class_names()
        # parse every record once: the IOInfo and string attributes are not columns
        parsed: list[Node] = []
        shapes: dict[int, tuple[str, str]] = {}
        other = policy.keeps_other_attributes()
        extra: dict[int, list[bytes]] = {}
        for row, record in enumerate(trace.records()):
            node = Node.FromString(record)
            parsed.append(node)
            for attr in node.attr:
                kind = attr.WhichOneof("value")
                if kind == "string_val":
                    strings.add(attr.string_val)
                elif kind == "string_list":
                    strings.update(attr.string_list.values)
                if other and attr.name not in _COLUMN_ATTRS and policy.keeps(attr.name):
                    extra.setdefault(row, []).append(Node(attr=[attr]).SerializeToString())
            for io in (node.inputs, node.outputs):
                if io.values:
                    strings.update(quoted_strings(io.values))
                if io.types:
                    strings.update(quoted_strings(io.types))
            if node.inputs.shapes or node.outputs.shapes:
                shapes[row] = (node.inputs.shapes, node.outputs.shapes)
        classes = [""] * len(names)
        first_row = np.full(len(names), -1, dtype=np.int64)
        idx = trace.name_idx
        uniq, first = np.unique(idx, return_index=True)
        first_row[uniq[uniq >= 0]] = first[uniq >= 0]
        for i, name in enumerate(names):
            row = int(first_row[i])
            if row >= 0:
                classes[i] = node_class(int(trace.types[row]), int(trace.comm_type[row]), name)
        flops = self.derived_flops(names, classes, shapes)
        start, duration, ts, dur = self.timing()
        ints = self.int_columns(ts, dur)
        cpu = trace.is_cpu_op.tolist() if policy.keeps("is_cpu_op") else None
        pg = trace.pg_idx.tolist() if policy.keeps("pg_name") else None
        pg_new = [task.pg_map.get(s, s) for s in names]
        ids, types, name_idx = trace.ids.tolist(), trace.types.tolist(), idx.tolist()
        comm_types = trace.comm_type.tolist()
        starts, durations = start.tolist(), duration.tolist()
        dp, dd = trace.data_ptr.tolist(), trace.data_deps.tolist()
        cp, cd = trace.ctrl_ptr.tolist(), trace.ctrl_deps.tolist()
        attr, io = self.attrs, self.io
        missing = int(MISSING)
        with TraceWriter(task.target, _metadata(trace, policy), compress=False) as writer:
            for row in range(len(ids)):
                i = name_idx[row]
                name = kept[i] if i >= 0 and kept[i] else None
                if name is None:
                    t = types[row]
                    name = classes[i] if i >= 0 and classes[i] else node_class(t, comm_types[row], "")
                out = Node(id=ids[row], name=name, type=types[row], ctrl_deps=cd[cp[row]:cp[row + 1]],
                           data_deps=dd[dp[row]:dp[row + 1]], start_time_micros=starts[row],
                           duration_micros=durations[row])
                src = parsed[row]
                for side, dst in ((src.inputs, out.inputs), (src.outputs, out.outputs)):
                    if side.values or side.shapes or side.types:
                        if types[row] == NodeType.METADATA_NODE and "pg_name" in side.values:
                            values = _group_init_values(side.values, task.pg_map)
                        else:
                            values = io.values(side.values)
                        shape, kinds = io.shapes_text(side.shapes), io.types_text(side.types)
                        if values or shape or kinds:
                            dst.values, dst.shapes, dst.types = values, shape, kinds
                parts = [out.SerializeToString()]
                if cpu is not None and cpu[row] >= 0:
                    parts.append(_attr_bytes(attr, "is_cpu_op", bool(cpu[row])))
                for aname, col in ints:
                    value = col[row]
                    if value != missing:
                        parts.append(_attr_bytes(attr, aname, value))
                if row in flops:
                    parts.append(_attr_bytes(attr, "num_ops", flops[row]))
                if pg is not None and pg[row] >= 0:
                    parts.append(_attr_bytes(attr, "pg_name", pg_new[pg[row]]))
                if row in extra:
                    parts.extend(extra[row])
                writer.write_record(b"".join(parts))
                parsed[row] = None  # type: ignore[call-overload]
        self.outcome.tensors = len(io.tensor_ids)
        self.outcome.strings = text_strings(strings)
        return self.outcome


_COLUMN_ATTRS = frozenset(HOT_ATTRIBUTES)


def rewrite_rank(task: RankTask) -> RankOutcome:
    """Executor task: write the anonymised ``task.source`` to ``task.target``."""
    return _RankWriter(task, load_trace(task.source)).run()
