"""One rank of ``etkit anonymize``: the executor tasks that survey a rank file and rewrite it.

:func:`survey_rank` reads the columns only (what the job-wide choices need: the earliest timestamp,
the process-group names in use, the groups declared by METADATA nodes: :func:`etkit.model.survey.survey_file`).
:func:`rewrite_rank` writes the anonymised rank and returns the input's strings (for the leak search), those of
them and of the task's shared strings found in the bytes it wrote (searched as written, the GlobalMetadata record
and the node records apart: :func:`~etkit.anonymize.leaks.find_in_joined`), and counts. Each task holds one rank
at a time.

Every output node is built from the policy: its id, type, dependencies and (shifted, jittered) timing;
its class as name; the kept attributes from the trace's columns (in their canonical kinds); its IOInfo
rewritten by :class:`~etkit.anonymize.ioinfo.IoRewriter` (its byte loops in C where
:data:`etkit.anonymize.kernel.SCAN` is built). Nothing of the input record is copied but
attributes a policy keeps that are not columns. The IOInfo messages and the other attributes are where
the trace loader's walk found them (:func:`etkit.format.parts.walked_parts`; records it left to the
generic walk are walked again by :func:`etkit.format.parts.record_parts`), the records written by
:func:`etkit.format.encode.encode_nodes` (vectorised) and :class:`~etkit.format.stream.TraceWriter`; a
rank's IOInfo is rewritten once per distinct message.
"""

from __future__ import annotations

import math
from dataclasses import field

import numpy as np
import orjson

from .. import __version__
from ..arrays import distinct
from ..fileio import atomic_output
from ..format.attrs import CANONICAL_KINDS, make_attr
from ..format.columnar import WalkSpans
from ..format.encode import AttrColumn, NodeTable, Packed, encode_nodes, encode_strings
from ..format.parts import joined_spans, record_parts, span_table, walked_parts
from ..format.schema import GlobalMetadata, Node, NodeType
from ..format.stream import frame
from ..format.wire import int64s
from ..model.edges import edges
from ..model.groups import parse_process_group_init
from ..model.survey import survey_file
from ..model.trace import MISSING, Trace, load_trace
from ..records import record
from . import kernel
from .ioinfo import IoRewriter, parse_shapes, quoted_strings, starts_of
from .leaks import find_in_joined, needle_index, text_strings
from .opclass import GEMM_CLASSES, node_class
from .policy import HOT_ATTRIBUTES, Policy

__all__ = ["RankSurvey", "survey_rank", "RankTask", "RankOutcome", "rewrite_rank", "searched_strings", "PRODUCER",
           "VOCABULARY"]

#: The ``producer`` of an anonymised trace's GlobalMetadata.
PRODUCER = f"etkit {__version__} anonymize"


@record(frozen=True)
class RankSurvey:
    rank: int
    nodes: int
    first_start_us: int | None  # earliest non-zero start_time_micros
    pg_names: frozenset[str]
    declared: dict[str, tuple[int, ...]]  # groups declared by METADATA nodes


def survey_rank(item: tuple[int, str]) -> RankSurvey:
    """Executor task: what the job-wide choices need from one rank file (:func:`etkit.model.survey.survey_file`)."""
    rank, path = item
    survey = survey_file(path, start=True)
    start = survey.start if survey.start is not None else np.zeros(0, dtype=np.uint64)
    timed = start[start > 0]
    return RankSurvey(rank, len(survey), int(timed.min()) if timed.size else None, survey.pg_names,
                      dict(survey.declared.groups))


@record(frozen=True)
class RankTask:
    """What one rewrite task needs (small and picklable)."""

    rank: int
    source: str
    target: str
    policy: Policy
    shift_us: int  # subtracted from every non-zero start_time_micros
    shift_ns: int  # subtracted from every ts_ns
    pg_map: dict[str, str]  # old pg_name -> new
    shared: frozenset[str] = frozenset()  # text strings searched in every output besides the rank's own (paths, groups)
    vocabulary: str = ""  # etkit's own words: a string inside them is not searched (:func:`searched_strings`)


@record
class RankOutcome:
    rank: int
    nodes: int
    strings: set[str] = field(default_factory=set)  # the input's text strings (for the leak search)
    leaks: set[str] = field(default_factory=set)  # of searched_strings(strings | task.shared), those in the output
    tensors: int = 0  # distinct tensors renumbered
    flops_derived: int = 0  # nodes that got num_ops from their shapes
    max_jitter: float = 0.0  # largest relative change of a duration


#: Words etkit writes whatever the input: attribute names, classes, devices, the producer. A string of the
#: input that is one of these (or inside one) is reported as vocabulary, not as a leak.
VOCABULARY: tuple[str, ...] = ("pg_name", "ranks", PRODUCER, "producer", "None")


def searched_strings(strings: set[str], policy: Policy, vocabulary: str) -> set[str]:
    """The ``strings`` the leak search looks for: those neither inside etkit's own words (``vocabulary``, a text of
    them) nor kept on purpose by the policy (``ProfilerStep#N``, ...)."""
    return {s for s in strings if s not in vocabulary and not policy.listed_name(s)}


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


@record(frozen=True)
class _Warp:
    """A jittered clock of one rank: its distinct event times (starts and ends, in µs) and their new times.

    Each gap between consecutive events changes by ``trunc(gap * u)`` (``|u| <= R``, seeded), so every
    duration and every gap between two events changes by at most R, no gap becomes zero, and no two events
    change order: the nesting, the order of the thread's ops and whether an op started before or after a
    communication ended (what simulators and analyses read from the timeline) stay as they were. Jittering
    each duration alone would move an op's end past the next op's start, and the start differences would
    still tell the exact durations."""

    old: np.ndarray
    new: np.ndarray

    @classmethod
    def of(cls, start: np.ndarray, duration: np.ndarray, noise: np.ndarray) -> _Warp:
        timed = start > 0
        events = distinct(np.concatenate([start[timed], start[timed] + duration[timed]]).astype(np.int64))
        if not events.size:
            return cls(events, events)
        gaps = np.diff(events)
        new = np.empty_like(events)
        new[0] = events[0]
        np.cumsum(gaps + np.trunc(gaps * noise[:gaps.size]).astype(np.int64), out=new[1:])
        new[1:] += events[0]
        return cls(events, new)

    def times(self, values: np.ndarray) -> np.ndarray:
        """The new time of each event time of ``values``."""
        return self.new[np.searchsorted(self.old, values)]

    def times_ns(self, values: np.ndarray) -> np.ndarray:
        """Nanosecond times on the same clock (linear between its events, shifted alike outside them)."""
        if self.old.size < 2:
            return values + (int(self.new[0] - self.old[0]) * 1000 if self.old.size else 0)
        us = values.astype(np.float64) / 1000.0
        offset = np.interp(us, self.old.astype(np.float64), (self.new - self.old).astype(np.float64))
        return values + np.rint(offset * 1000.0).astype(np.int64)


def _warp_ns(warp: _Warp, ts: np.ndarray, dur: np.ndarray, noise: np.ndarray, bound: float) -> None:
    """``ts_ns``/``dur_ns`` (in place) on the jittered clock: a timed node's end and start move with it, its
    duration kept within ``bound`` of the measured one (the rounding to a nanosecond may not exceed it);
    a duration without a timestamp is jittered alone."""
    timed = (ts != MISSING) & (dur != MISSING)
    alone = (dur != MISSING) & ~timed
    dur[alone] = _jittered(dur[alone], noise[alone])
    if not timed.any():
        return
    t, d = ts[timed], dur[timed]
    new_ts = warp.times_ns(t)
    slack = np.floor(d * bound).astype(np.int64)
    dur[timed] = np.clip(warp.times_ns(t + d) - new_ts, d - slack, d + slack)
    ts[timed] = new_ts
    untimed_ts = (ts != MISSING) & ~timed
    ts[untimed_ts] = warp.times_ns(ts[untimed_ts])


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
    ctrl = edges(trace, "ctrl")
    holds = np.zeros(len(trace), dtype=bool)
    holds[ctrl.parent[(ctrl.parent >= 0) & member[ctrl.child]]] = True
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


def _unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, axis=0, return_inverse=True)`` of rows of integers >= -1, through one int64 key per row
    where the rows' ranges fit in one (a sort of numbers, several times cheaper than one of rows)."""
    widths = [int(c.max(initial=-1)) + 2 for c in keys.T]
    if not keys.size or math.prod(widths) >= 1 << 62:
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        return unique, inverse.ravel()
    key = np.zeros(keys.shape[0], dtype=np.int64)
    for column, width in zip(keys.T, widths):
        key = key * width + (column + 1)
    distinct, inverse = np.unique(key, return_inverse=True)
    unique = np.empty((distinct.size, keys.shape[1]), dtype=keys.dtype)
    for j in range(keys.shape[1] - 1, -1, -1):
        distinct, unique[:, j] = np.divmod(distinct, widths[j])
        unique[:, j] -= 1
    return unique, inverse.ravel()


def _group_init_values(text: str, pg_map: dict[str, str]) -> str:
    """A ``process_group:init`` values text with the groups renamed and nothing but names and ranks kept."""
    groups = parse_process_group_init(text).groups
    entries = [{"pg_name": pg_map.get(name, name), "ranks": list(ranks)} for name, ranks in groups.items()]
    return str([orjson.dumps(entries).decode()])


@record
class _Shapes:
    """Each node's IOInfo shapes text, per side: an index into that side's table of texts (-1: no IOInfo)."""

    index: np.ndarray  # (nodes, 2)
    texts: list[list[str]]


class _RankWriter:
    """Builds the anonymised nodes of one rank."""

    def __init__(self, task: RankTask, trace: Trace, spans: list[WalkSpans | None] | None = None) -> None:
        self.task, self.trace, self.policy, self.spans = task, trace, task.policy, spans
        self.io = IoRewriter(self.policy.tensors, self.policy.shapes, self.policy.types)
        self.outcome = RankOutcome(task.rank, len(trace))
        self._classes: list[str] | None = None

    def timing(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        trace, policy, task = self.trace, self.policy, self.task
        start = trace.start.astype(np.int64)
        duration = trace.duration.astype(np.int64)
        n = len(trace)
        noise = _jitter_factors(policy, task.rank, 3 * n)  # per node, then per gap between events (at most 2n)
        warp = None
        if noise is not None:
            warp = _Warp.of(start, duration, noise[n:])
            timed = start > 0
            new_start, new_end = warp.times(start[timed]), warp.times(start[timed] + duration[timed])
            duration = _jittered(duration, noise[:n])  # nodes without a timestamp: their duration alone
            duration[timed] = new_end - new_start
            start[timed] = new_start
            d = trace.duration.astype(np.float64)
            changed = d > 0
            if changed.any():
                self.outcome.max_jitter = float(np.max(np.abs(duration[changed] - d[changed]) / d[changed]))
        if policy.timestamps == "drop":
            start = np.zeros_like(start)
        elif policy.timestamps == "shift":
            start = np.where(start > 0, start - task.shift_us, 0)
        ts = dur = None
        if hasattr(trace, "ts_ns"):
            ts = trace.ts_ns.copy()
            dur = trace.dur_ns.copy()
            have = ts != MISSING
            if warp is not None and noise is not None:
                _warp_ns(warp, ts, dur, noise[:n], policy.jitter)
            if policy.timestamps == "drop":
                ts[:] = MISSING
            elif policy.timestamps == "shift":
                ts[have] = ts[have] - task.shift_ns
        return start, duration, ts, dur

    def int_columns(self, ts: np.ndarray | None, dur: np.ndarray | None) -> list[AttrColumn]:
        """The kept integer attributes from the columns (MISSING where a node lacks one), in output order."""
        trace, policy = self.trace, self.policy
        comm = np.isin(trace.types, (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE))
        out = []
        if policy.keeps("is_cpu_op"):
            out.append(AttrColumn("is_cpu_op", "bool_val", np.where(trace.is_cpu_op < 0, MISSING, trace.is_cpu_op)))
        for name in ("num_ops", "tensor_size", "comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag",
                     "comm_priority", "tid", "stream", "cat", "ts_ns", "dur_ns"):
            if not policy.keeps(name):
                continue
            col = ts if name == "ts_ns" else dur if name == "dur_ns" else getattr(trace, name, None)
            if col is None:
                continue
            if policy.comm_sizes == "pow2" and name in ("comm_size", "tensor_size"):
                col = np.where(comm, _pow2(col), col) if name == "tensor_size" else _pow2(col)
            kind = CANONICAL_KINDS.get(name, "int64_val")
            if kind == "uint64_val" and (col[col != MISSING] < 0).any():
                kind = "int64_val"
            out.append(AttrColumn(name, kind, col))
        return out

    def flop_rows(self) -> np.ndarray | None:
        """Rows that may get FLOPs from their shapes (before the leaf check), None when the policy derives none."""
        if self.policy.flops != "derive":
            return None
        trace = self.trace
        if self._classes is None:
            return None
        wanted = np.asarray([c in GEMM_CLASSES or c == "conv" for c in self._classes] + [False], dtype=bool)
        comp = trace.types == NodeType.COMP_NODE
        rows = comp & wanted[trace.name_idx] & (trace.num_ops == MISSING)
        device = comp & (trace.is_cpu_op != 1)
        if device.any():  # the ops that are the compute: device ones where the rank has them, else the host's
            rows &= trace.is_cpu_op != 1
        return rows

    def derived_flops(self, names: list[str], classes: list[str], shapes: _Shapes) -> tuple[np.ndarray, np.ndarray]:
        """num_ops for leaf GEMM/convolution rows without one, from the shapes of their IOInfo: the rows and
        their FLOPs, worked out once per distinct (name, input shapes, output shapes)."""
        candidates = self.flop_rows()
        none = np.zeros(0, dtype=np.int64)
        if candidates is None:
            return none, none
        rows = _leaf_rows(self.trace, np.flatnonzero(candidates))
        if not rows.size:
            return none, none
        keys = np.stack([self.trace.name_idx[rows].astype(np.int64), shapes.index[rows, 0], shapes.index[rows, 1]], axis=1)
        unique, inverse = _unique_rows(keys)
        parsed = [[parse_shapes(t) for t in side] for side in shapes.texts]
        flops = []
        for name, into, out in unique.tolist():
            value = _gemm_flops(names[name], classes[name].removesuffix("_backward"),
                                parsed[0][into] if into >= 0 else None, parsed[1][out] if out >= 0 else None)
            flops.append(value if value is not None and value > 0 else 0)
        per_row = np.asarray(flops, dtype=np.int64)[inverse.ravel()]
        keep = per_row > 0
        self.outcome.flops_derived = int(keep.sum())
        return rows[keep], per_row[keep]

    def io_columns(self, view: _RankView) -> tuple[Packed, np.ndarray, np.ndarray, _Shapes]:
        """The rewritten IOInfo of every node: the encoded messages, the index of each node's inputs and
        outputs among them (-1: none), and each node's shapes texts (for the FLOPs).

        The values texts of both sides are rewritten in one batch (:meth:`IoRewriter.values_sides`); shapes
        and types texts once per distinct text."""
        trace, io, strings = self.trace, self.io, self.outcome.strings
        n = len(trace)
        metadata = trace.types == NodeType.METADATA_NODE
        index = np.full((n, 2), -1, dtype=np.int64)
        shapes = _Shapes(np.full((n, 2), -1, dtype=np.int64), [[], []])
        rewritten = io.values_sides((view.values[0], view.value_len[0]), (view.values[1], view.value_len[1]))
        blobs, offsets_all, sizes_all = [], [], []
        base = size = 0
        for side in (0, 1):
            rows = view.io_rows[side]
            m = int(rows.size)
            if not m:
                continue
            text, starts, lengths = rewritten[side]
            init = np.flatnonzero(metadata[rows])
            if init.size:  # process_group:init: names and ranks only
                text, starts, lengths = self._group_inits(view.values[side], view.value_len[side], init, text, starts,
                                                          lengths)
            shape_idx, shape_texts = view.shapes[side]
            new_shapes = [io.shapes_text(t).encode() for t in shape_texts]
            type_idx, type_texts = view.types[side]
            for t in type_texts:
                strings.update(quoted_strings(t))
            new_types = [io.types_text(t).encode() for t in type_texts]
            blob, offsets, sizes = encode_strings(m, [(1, Packed.of(text, starts, lengths), np.arange(m)),
                                                      (2, new_shapes, shape_idx.astype(np.int64)),
                                                      (3, new_types, type_idx.astype(np.int64))])
            blobs.append(blob)
            offsets_all.append(offsets + size)
            sizes_all.append(sizes)
            size += len(blob)
            index[rows, side] = np.where(sizes > 0, base + np.arange(m), -1)  # an IOInfo left empty is left out
            base += m
            shapes.index[rows, side] = shape_idx
            shapes.texts[side] = shape_texts
        strings.update(io.found)
        packed = Packed.of(b"".join(blobs), np.concatenate(offsets_all) if offsets_all else np.zeros(0, np.int64),
                           np.concatenate(sizes_all) if sizes_all else np.zeros(0, np.int64))
        return packed, index[:, 0], index[:, 1], shapes

    def _group_inits(self, original: bytes, original_len: np.ndarray, init: np.ndarray, text: bytes,
                     starts: np.ndarray, lengths: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
        """The values texts ``text`` (spans ``starts``/``lengths``) with those of the ``process_group:init`` nodes
        ``init`` made from their original text (``original``, one byte apart): the groups renamed, nothing but
        names and ranks kept."""
        o_starts = starts_of(original_len, 1)
        pieces: list[bytes] = []
        new_lengths, done = lengths.copy(), 0
        for i in init.tolist():
            value = original[o_starts[i]:o_starts[i] + original_len[i]].decode("utf-8", "surrogateescape")
            self.outcome.strings.update(quoted_strings(value))
            if "pg_name" in value:
                new = _group_init_values(value, self.task.pg_map).encode()
                pieces.extend((text[done:starts[i]], new))
                done = int(starts[i] + lengths[i])
                new_lengths[i] = len(new)
        if not pieces:
            return text, starts, lengths
        pieces.append(text[done:])
        gaps = np.diff(starts) - lengths[:-1]  # what lies between the texts (a separator, or nothing)
        new_starts = starts_of(new_lengths, 0)
        new_starts[1:] += np.cumsum(gaps)
        return b"".join(pieces), new_starts, new_lengths

    def run(self) -> RankOutcome:
        trace, policy, task = self.trace, self.policy, self.task
        view = _RankView.of(trace, policy, self.spans)
        self.spans = None
        strings = self.outcome.strings
        strings.update(trace.strings)
        strings.update(view.strings)
        names = list(trace.strings)
        n = len(trace)
        # the class of every name (from the first node that has it) or the name itself where the policy keeps it
        classes = [""] * len(names)
        uniq, first = np.unique(trace.name_idx, return_index=True)
        for i, row in zip(uniq.tolist(), first.tolist()):
            if i >= 0:
                classes[i] = node_class(int(trace.types[row]), int(trace.comm_type[row]), names[i])
        new_names = [name if policy.keeps_name(name) else cls for name, cls in zip(names, classes)]
        self._classes = classes
        io_table, inputs, outputs, shapes = self.io_columns(view)
        flop_rows, flops = self.derived_flops(names, classes, shapes)
        start, duration, ts, dur = self.timing()
        attrs = self.int_columns(ts, dur)
        if flop_rows.size:
            for column in attrs:
                if column.name == "num_ops":
                    column.values = np.array(column.values, copy=True)
                    column.values[flop_rows] = flops
                    break
            else:
                ops = np.full(n, MISSING, dtype=np.int64)
                ops[flop_rows] = flops
                attrs.insert(1 if attrs and attrs[0].name == "is_cpu_op" else 0, AttrColumn("num_ops", "int64_val", ops))
        if policy.keeps("pg_name") and (trace.pg_idx >= 0).any():
            renamed = [task.pg_map.get(s, s) for s in names]
            order: dict[str, int] = {}
            for r in renamed:
                order.setdefault(r, len(order))
            table = list(order)
            position = np.asarray([order[r] for r in renamed] + [-1], dtype=np.int64)
            encoded = [make_attr("pg_name", t).SerializeToString() for t in table]
            attrs.append(AttrColumn("pg_name", table=encoded, index=position[trace.pg_idx]))
        for name, (rows, payloads) in view.extra(policy).items():
            index = np.full(n, -1, dtype=np.int64)
            index[rows] = np.arange(len(rows))
            attrs.append(AttrColumn(name, table=payloads, index=index))
        # names: per name index, and for the nodes without a name their type's
        table_names = list(dict.fromkeys(new_names + [node_class(t, -1, "") for t in range(8)]))
        lookup = {s: i for i, s in enumerate(table_names)}
        by_index = np.asarray([lookup[s] for s in new_names] + [-1], dtype=np.int64)
        name_idx = by_index[trace.name_idx]
        unnamed = np.flatnonzero(name_idx < 0)
        if unnamed.size:
            by_type = np.asarray([lookup[node_class(t, -1, "")] for t in range(8)], dtype=np.int64)
            name_idx[unnamed] = by_type[np.clip(trace.types[unnamed], 0, 7)]
        nodes = NodeTable(trace.ids, trace.types, [s.encode() for s in table_names], name_idx,
                          trace.ctrl_ptr, trace.ctrl_deps, trace.data_ptr, trace.data_deps,
                          start.astype(np.uint64), duration.astype(np.uint64), io_table, inputs, outputs, attrs)
        framed, _, lengths = encode_nodes(nodes, framed=True)
        if lengths.size and not lengths.min():
            raise ValueError("refusing to write an empty node record")  # as TraceWriter does
        head = frame(_metadata(trace, policy).SerializeToString())
        with atomic_output(task.target, compress=False) as out:
            out.write(head)
            out.write(framed)
        self.outcome.tensors = self.io.tensors_renumbered
        self.outcome.strings = text_strings(strings)
        # the leak search of this output for the strings this task knows of (the caller searches it for the others)
        searched = searched_strings(self.outcome.strings | task.shared, policy, task.vocabulary)
        found = find_in_joined(head, framed, needle_index(searched))
        self.outcome.leaks = {s.decode("utf-8", "surrogatepass") for s in found}
        return self.outcome


@record
class _RankView:
    """What the columns do not hold, per node: its encoded IOInfo messages and its other attributes
    (from :func:`etkit.format.parts.record_parts`, or by parsing each node when that declines)."""

    io_rows: list[np.ndarray]  # per side (inputs, outputs): the rows that have that IOInfo
    values: list[bytes]  # per side: their values texts joined by \\x1f
    value_len: list[np.ndarray]  # per side: the length of each values text
    shapes: list[tuple[np.ndarray, list[str]]]  # per side: each row's shapes text as an index into a table
    types: list[tuple[np.ndarray, list[str]]]
    strings: list[str]
    attrs: dict[str, tuple[list[int], list[bytes]]]  # attribute name -> (rows, encoded AttributeProto)

    def extra(self, policy: Policy) -> dict[str, tuple[list[int], list[bytes]]]:
        """The kept attributes that are not columns."""
        return {name: v for name, v in self.attrs.items() if name not in _COLUMN_ATTRS and policy.keeps(name)}

    @classmethod
    def of(cls, trace: Trace, policy: Policy, spans: list[WalkSpans | None] | None = None) -> _RankView:
        """The view of ``trace``; ``spans``: what its loader's walk found (then the records are not walked again)."""
        # only the names of the kept attributes that are not columns are told apart (all of them: other_attributes keep)
        wanted = None if policy.other_attributes == "keep" else \
            [a for a, action in policy.attributes.items() if action == "keep" and a not in _COLUMN_ATTRS]
        # the attributes in the loader's walk order: each record's in wire order, which is all the view needs
        parts = walked_parts(trace.blob, len(trace), spans, wanted, ordered=False) if spans else None
        if parts is None:
            parts = record_parts(trace.blob, trace.rec_off, trace.rec_len, wanted)
        return cls._parsed(trace) if parts is None else cls._from_parts(trace.blob, parts)

    @classmethod
    def _from_parts(cls, blob: bytes, parts) -> _RankView:  # noqa: ANN001
        rows, values, value_len, shapes, types = [], [], [], [], []
        for side in (0, 1):
            have = np.flatnonzero(parts.io_off[:, side] >= 0)
            rows.append(have)
            off, size = parts.text_off[have], parts.text_len[have]
            values.append(_joined_texts(blob, off[:, 3 * side], size[:, 3 * side]))
            value_len.append(np.where(off[:, 3 * side] >= 0, size[:, 3 * side], 0).astype(np.int64))
            shapes.append(span_table(parts.buf, off[:, 3 * side + 1], size[:, 3 * side + 1], padded=True))
            types.append(span_table(parts.buf, off[:, 3 * side + 2], size[:, 3 * side + 2], padded=True))
        attrs: dict[str, tuple[list[int], list[bytes]]] = {}
        for i, name in enumerate(parts.names):
            if name in _COLUMN_ATTRS:
                continue
            sel = np.flatnonzero(parts.attr_name == i)
            attrs[name] = (parts.attr_row[sel].tolist(),
                           [blob[o:o + k] for o, k in zip(parts.attr_off[sel].tolist(), parts.attr_len[sel].tolist())])
        return cls(rows, values, value_len, shapes, types, parts.strings, attrs)

    @classmethod
    def _parsed(cls, trace: Trace) -> _RankView:
        rows: list[list[int]] = [[], []]
        texts: list[list[tuple[str, str, str]]] = [[], []]
        strings: list[str] = []
        attrs: dict[str, tuple[list[int], list[bytes]]] = {}
        for row, raw in enumerate(trace.records()):
            node = Node.FromString(raw)
            for side, field_name in enumerate(("inputs", "outputs")):
                if node.HasField(field_name):
                    msg = getattr(node, field_name)
                    rows[side].append(row)
                    texts[side].append((msg.values, msg.shapes, msg.types))
            for attr in node.attr:
                kind = attr.WhichOneof("value")
                if kind == "string_val":
                    strings.append(attr.string_val)
                elif kind == "string_list":
                    strings.extend(attr.string_list.values)
                if attr.name not in _COLUMN_ATTRS:
                    entry = attrs.setdefault(attr.name, ([], []))
                    entry[0].append(row)
                    entry[1].append(attr.SerializeToString())

        def table(column: list[str]) -> tuple[np.ndarray, list[str]]:
            index: dict[str, int] = {}
            return np.asarray([index.setdefault(t, len(index)) for t in column], dtype=np.int32), list(index)

        encoded = [[t[0].encode("utf-8", "surrogateescape") for t in side] for side in texts]
        return cls([np.asarray(r, dtype=np.int64) for r in rows], [b"\x1f".join(side) for side in encoded],
                   [np.fromiter(map(len, side), dtype=np.int64, count=len(side)) for side in encoded],
                   [table([t[1] for t in side]) for side in texts], [table([t[2] for t in side]) for side in texts],
                   strings, attrs)


_COLUMN_ATTRS = frozenset(HOT_ATTRIBUTES)


def _joined_texts(blob: bytes, off: np.ndarray, length: np.ndarray) -> bytes:
    """:func:`~etkit.format.parts.joined_spans` by \\x1f (the values texts :class:`IoRewriter` takes), in C
    where :data:`etkit.anonymize.kernel.SCAN` is built."""
    if kernel.SCAN is not None:
        return kernel.SCAN.joined(blob, int64s(off), int64s(length), 0x1F)
    return joined_spans(blob, off, length, b"\x1f")


def rewrite_rank(task: RankTask) -> RankOutcome:
    """Executor task: write the anonymised ``task.source`` to ``task.target``."""
    spans: list[WalkSpans | None] = []
    writer = _RankWriter(task, load_trace(task.source, spans=spans), spans)
    del spans  # the writer lets go of them once it has the record parts
    return writer.run()
