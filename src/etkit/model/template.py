"""Writing synthetic jobs fast: encode each role's nodes once, stamp ranks from the encoded template.

Synthetic workloads are rank-symmetric: every rank of a role (a pipeline stage, a tensor-parallel
position, ...) has the same graph, and only a few attribute values change from rank to rank (the peer
of a send, the ``pg_name`` of a collective). So a producer builds one :class:`TraceTemplate` per
distinct role, in which such values are named :class:`Param` placeholders, and :func:`write_job` stamps
every rank from its role's template with the rank's values. Nothing is re-encoded per rank except the
placeholder attributes, and runs of fixed nodes are copied as one pre-framed byte string.

Why appending works: ``attr`` is field 10, the highest field of ``Node``, so a node's bytes are its
fixed part followed by one encoded ``attr`` field per attribute. Appending the stamped attribute
encodings keeps the standard field order, and protobuf concatenation semantics make the result the
same message as if the attributes had been in the node from the start.

Typical use (ids are handed out in creation order, starting at 0)::

    tpl = TraceTemplate(synthetic_metadata("etkit.generate.llm"))
    fwd = tpl.comp("fwd", duration=120, num_ops=4_000_000, tensor_size=65_536)
    snd = tpl.send("send_act", size=1 << 20, dst=Param("next_stage"), tag=7, deps=[fwd])
    ar = tpl.coll("grad_all_reduce", CommType.ALL_REDUCE, 1 << 26, pg_name=Param("dp_group"), deps=[fwd])
    write_job("out/llm", [RankPlan(r, "stage0", {"next_stage": r + 4, "dp_group": "1"}) for r in ...],
              {"stage0": tpl}, groups=ProcessGroups.from_mapping({"1": [0, 1, 2, 3]}))

The in-memory form of a stamped rank is :meth:`TraceTemplate.trace` (a columnar
:class:`~etkit.model.trace.Trace`); :func:`build_job` gives a whole :class:`~etkit.model.job.Job`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, Union

from .. import __version__
from ..executor import Executor, SerialExecutor
from ..fileio import JobOutput, atomic_output, check_writable, job_output
from ..format import schema
from ..format.attrs import CANONICAL_KINDS, make_attr
from ..format.schema import SCHEMA_VERSION, CommType, NodeType
from ..format.stream import encode_varint, frame
from ..format.tags import NODE_ATTR, key_byte
from ..records import record
from .groups import ProcessGroups
from .job import Job, comm_groups_path
from .trace import Trace

if TYPE_CHECKING:
    from ..format.schema import GlobalMetadata, Node

__all__ = [
    "Param",
    "RankPlan",
    "TraceTemplate",
    "WriteTask",
    "attr_field",
    "build_job",
    "frame_runs",
    "plan_writes",
    "run_writes",
    "synthetic_metadata",
    "write_groups",
    "write_job",
]

#: Wire tag of ``Node.attr`` (field 10, length-delimited).
_ATTR_TAG = key_byte(NODE_ATTR)

#: A value an attribute may take: a constant, or a placeholder filled per rank.
Value = Union[int, str, bool, "Param"]


@record(frozen=True)
class Param:
    """A placeholder for a per-rank attribute value, filled from the rank's params at stamping time.

    ``Param("next_stage")`` in a template means "the value ``params["next_stage"]`` of the rank being
    written". Missing params raise ``KeyError`` naming the param.
    """

    name: str


@record(frozen=True)
class RankPlan:
    """What to write for one rank: the role (template key) and the values of its placeholders."""

    rank: int
    role: str
    params: Mapping[str, int | str | bool] = field(default_factory=dict)


_ATTR_CACHE: dict[tuple[str, str, str, object], bytes] = {}


def attr_field(name: str, value: int | str | bool, kind: str | None = None) -> bytes:
    """The bytes of one ``Node.attr`` field (tag, length, AttributeProto) for ``name`` = ``value``.

    The kind is ``kind``, else the canonical kind of ``name`` (``comm_src`` int32, ``pg_name``
    string, ...), else inferred. Results are cached: stamping reuses the same few encodings.
    """
    kind = kind or CANONICAL_KINDS.get(name) or ""
    key = (name, kind, type(value).__name__, value)
    cached = _ATTR_CACHE.get(key)
    if cached is None:
        if kind == "string_val":
            value = str(value)
        payload = make_attr(name, value, kind or None).SerializeToString()
        cached = _ATTR_TAG + encode_varint(len(payload)) + payload
        if len(_ATTR_CACHE) < 1 << 16:
            _ATTR_CACHE[key] = cached
    return cached


def synthetic_metadata(source: str, **attrs: int | str) -> GlobalMetadata:
    """GlobalMetadata for a generated trace: version :data:`~etkit.format.schema.SCHEMA_VERSION` and attrs
    ``producer``, ``source``, extras."""
    meta = schema.GlobalMetadata(version=SCHEMA_VERSION)
    meta.attr.append(make_attr("producer", f"etkit {__version__}"))
    meta.attr.append(make_attr("source", source))
    for name, value in attrs.items():
        meta.attr.append(make_attr(name, value))
    return meta


_T = TypeVar("_T")


def frame_runs(items: Iterable[_T]) -> list[_T | bytes]:
    """``items`` with every run of consecutive records (``bytes``) framed and joined into one byte string;
    the other items (records stamped per rank) stay as they are, in order."""
    out: list[_T | bytes] = []
    run: list[bytes] = []
    for item in items:
        if isinstance(item, bytes):
            run.append(frame(item))
            continue
        if run:
            out.append(b"".join(run))
            run = []
        out.append(item)
    if run:
        out.append(b"".join(run))
    return out


@record
class _Stamped:
    """A node whose fixed bytes are followed by attributes filled per rank."""

    fixed: bytes
    holes: tuple[tuple[str, str, str], ...]  # (attr name, kind, param name)


class TraceTemplate:
    """One role's trace: nodes encoded once, with :class:`Param` attribute placeholders.

    Build it with :meth:`comp`, :meth:`coll`, :meth:`send`, :meth:`recv`, :meth:`metadata_node` (each
    returns the new node's id, handed out from 0 in creation order) or :meth:`add` for any ``Node``.
    Node order in the file is creation order, so create parents before children.
    """

    def __init__(self, metadata: GlobalMetadata | None = None) -> None:
        self.metadata = metadata or schema.GlobalMetadata()
        self._meta_record = self.metadata.SerializeToString()
        self._nodes: list[bytes | _Stamped] = []
        self._next_id = 0
        self._compiled: list[bytes | _Stamped] | None = None

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def next_id(self) -> int:
        """The id the next created node will get."""
        return self._next_id

    # -- building ---------------------------------------------------------------------------------

    def add(self, node: Node, params: Mapping[str, str] | None = None,
            kinds: Mapping[str, str] | None = None) -> int:
        """Append ``node`` as is (its own id); ``params`` maps attr name -> param name to stamp per rank.

        Stamped attributes come after the node's own attributes; ``kinds`` overrides their value kind
        (default: canonical kind of the name).
        """
        if node.id >= self._next_id:
            self._next_id = node.id + 1
        fixed = node.SerializeToString()
        if not fixed:
            raise ValueError("refusing to add an empty node (id 0 and no other field)")
        if params:
            kinds = kinds or {}
            holes = tuple((attr, kinds.get(attr) or CANONICAL_KINDS.get(attr, ""), param)
                          for attr, param in params.items())
            self._nodes.append(_Stamped(fixed, holes))
        else:
            self._nodes.append(fixed)
        self._compiled = None
        return int(node.id)

    def node(self, name: str, node_type: NodeType, *, deps: Iterable[int] = (), ctrl_deps: Iterable[int] = (),
             duration: int = 0, attrs: Sequence[tuple[str, Value]] = ()) -> int:
        """Append a node with the next id; ``attrs`` are ``(name, value)`` pairs, values may be :class:`Param`."""
        node = schema.Node(id=self._next_id, name=name, type=node_type, duration_micros=int(duration))
        node.data_deps.extend(deps)
        node.ctrl_deps.extend(ctrl_deps)
        params: dict[str, str] = {}
        for attr_name, value in attrs:
            if isinstance(value, Param):
                params[attr_name] = value.name
            else:
                node.attr.append(make_attr(attr_name, value))
        return self.add(node, params)

    def comp(self, name: str, duration: int, *, num_ops: int | None = None, tensor_size: int | None = None,
             deps: Iterable[int] = (), is_cpu_op: bool = False) -> int:
        """A COMP_NODE of ``duration`` µs; ``num_ops`` (FLOPs) and ``tensor_size`` (bytes) when given."""
        attrs: list[tuple[str, Value]] = [("is_cpu_op", is_cpu_op)]
        if num_ops is not None:
            attrs.append(("num_ops", int(num_ops)))
        if tensor_size is not None:
            attrs.append(("tensor_size", int(tensor_size)))
        return self.node(name, NodeType.COMP_NODE, deps=deps, duration=duration, attrs=attrs)

    def coll(self, name: str, comm_type: CommType | int, size: int, *, pg_name: Value | None = None,
             deps: Iterable[int] = (), duration: int = 0, extra: Sequence[tuple[str, Value]] = ()) -> int:
        """A COMM_COLL_NODE; ``pg_name`` None = all ranks (no attribute), else a name or a :class:`Param`."""
        attrs: list[tuple[str, Value]] = [("is_cpu_op", False), ("comm_type", int(comm_type)),
                                          ("comm_size", int(size))]
        if pg_name is not None:
            attrs.append(("pg_name", pg_name))
        attrs.extend(extra)
        return self.node(name, NodeType.COMM_COLL_NODE, deps=deps, duration=duration, attrs=attrs)

    def send(self, name: str, size: int, *, src: Value, dst: Value, tag: Value, deps: Iterable[int] = (),
             pg_name: Value | None = None) -> int:
        """A COMM_SEND_NODE of ``size`` bytes from ``src`` to ``dst`` (global ranks) with ``tag``."""
        return self._p2p(name, NodeType.COMM_SEND_NODE, size, src, dst, tag, deps, pg_name)

    def recv(self, name: str, size: int, *, src: Value, dst: Value, tag: Value, deps: Iterable[int] = (),
             pg_name: Value | None = None) -> int:
        """A COMM_RECV_NODE of ``size`` bytes on ``dst`` from ``src`` with ``tag``."""
        return self._p2p(name, NodeType.COMM_RECV_NODE, size, src, dst, tag, deps, pg_name)

    def _p2p(self, name: str, node_type: NodeType, size: int, src: Value, dst: Value, tag: Value,
             deps: Iterable[int], pg_name: Value | None) -> int:
        # comm_size is what simulators read; tensor_size mirrors it for the reference generator's readers.
        attrs: list[tuple[str, Value]] = [("is_cpu_op", False), ("comm_size", int(size)),
                                          ("tensor_size", int(size)), ("comm_src", src), ("comm_dst", dst),
                                          ("comm_tag", tag)]
        if pg_name is not None:
            attrs.append(("pg_name", pg_name))
        return self.node(name, node_type, deps=deps, attrs=attrs)

    # -- stamping -------------------------------------------------------------------------------

    def _compile(self) -> list[bytes | _Stamped]:
        """Nodes with runs of fixed nodes merged into one pre-framed byte string."""
        if self._compiled is None:
            self._compiled = frame_runs(self._nodes)
        return self._compiled

    @staticmethod
    def _stamp(item: _Stamped, params: Mapping[str, int | str | bool]) -> bytes:
        parts = [item.fixed]
        for attr_name, kind, param in item.holes:
            try:
                value = params[param]
            except KeyError:
                raise KeyError(f"template param {param!r} (for attribute {attr_name!r}) not given") from None
            parts.append(attr_field(attr_name, value, kind or None))
        return b"".join(parts)

    def payloads(self, params: Mapping[str, int | str | bool] | None = None) -> list[bytes]:
        """Every node's record bytes for a rank with ``params`` (unframed, file order)."""
        params = params or {}
        return [item if isinstance(item, bytes) else self._stamp(item, params) for item in self._nodes]

    def render(self, params: Mapping[str, int | str | bool] | None = None) -> bytes:
        """The whole ``.et`` file content (GlobalMetadata then nodes, framed) for ``params``."""
        params = params or {}
        parts = [frame(self._meta_record)]
        for item in self._compile():
            parts.append(item if isinstance(item, bytes) else frame(self._stamp(item, params)))
        return b"".join(parts)

    def write(self, path: str | os.PathLike[str], params: Mapping[str, int | str | bool] | None = None) -> Path:
        """Write the stamped trace to ``path`` atomically (``.gz`` suffix = gzip)."""
        with atomic_output(path) as out:
            out.write(self.render(params))
        return Path(path)

    def trace(self, params: Mapping[str, int | str | bool] | None = None, *, path: str = "<generated>") -> Trace:
        """The stamped trace as a columnar :class:`Trace` (in memory)."""
        return Trace.from_records(self._meta_record, self.payloads(params), path=path)


def _write_chunk(task: tuple[TraceTemplate, list[tuple[str, Mapping[str, int | str | bool]]]]) -> int:
    template, jobs = task
    for path, params in jobs:
        template.write(path, params)
    return len(jobs)


#: One executor task: a template and the ``(path, params)`` of the ranks stamped from it.
WriteTask = tuple[TraceTemplate, list[tuple[str, Mapping[str, int | str | bool]]]]


def plan_writes(prefix: str | os.PathLike[str], plans: Iterable[RankPlan], templates: Mapping[str, TraceTemplate],
                *, chunk: int = 64, out: JobOutput | None = None) -> tuple[list[WriteTask], list[Path]]:
    """The write tasks of one job (up to ``chunk`` ranks of one role each) and its rank files in rank order.

    Use it with :func:`run_writes` to write several jobs under one executor call (one progress bar). With
    ``out`` (an open :func:`~etkit.fileio.job_output`) the tasks write into its staging folder; the
    returned paths are the final ones either way.
    """
    by_role: dict[str, list[tuple[str, Mapping[str, int | str | bool]]]] = {}
    paths: dict[int, Path] = {}
    for plan in plans:
        if plan.role not in templates:
            raise KeyError(f"rank {plan.rank}: no template for role {plan.role!r}")
        if plan.rank in paths:
            raise ValueError(f"rank {plan.rank} planned twice")
        path = paths[plan.rank] = Path(f"{prefix}.{plan.rank}.et")
        staged = out.path(path) if out is not None else path
        by_role.setdefault(plan.role, []).append((str(staged), dict(plan.params)))
    tasks = [(templates[role], jobs[i:i + chunk]) for role, jobs in by_role.items()
             for i in range(0, len(jobs), chunk)]
    return tasks, [paths[r] for r in sorted(paths)]


def run_writes(tasks: Sequence[WriteTask], executor: Executor | None = None, *, desc: str = "write") -> int:
    """Run write tasks through ``executor`` (default: in-process); returns the number of files written."""
    if tasks:
        check_writable(tasks[0][1][0][0])  # in this process: one clear error, not one per worker
    return sum((executor or SerialExecutor()).map(_write_chunk, tasks, desc=desc))


def write_groups(prefix: str | os.PathLike[str], groups: ProcessGroups | Mapping[str, Iterable[int]] | None, *,
                 out: JobOutput | None = None) -> None:
    """Write ``<prefix>.comm_groups.json`` (into ``out``'s staging folder when given) when ``groups`` names at
    least one group."""
    if groups is None:
        return
    pg = groups if isinstance(groups, ProcessGroups) else ProcessGroups.from_mapping(groups)
    if pg.groups:
        pg.write(out.groups_path(prefix) if out is not None else comm_groups_path(prefix))


def write_job(prefix: str | os.PathLike[str], plans: Iterable[RankPlan], templates: Mapping[str, TraceTemplate],
              *, groups: ProcessGroups | Mapping[str, Iterable[int]] | None = None,
              executor: Executor | None = None, chunk: int = 64) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` for every plan (stamped from its role's template) and the groups JSON.

    Ranks are written in chunks of up to ``chunk`` ranks of one role per executor task, so a template
    travels to a worker once per chunk, not once per rank. ``groups`` (if any) go to
    ``<prefix>.comm_groups.json``. Returns the rank file paths in rank order.

    The job is written as a unit (:func:`~etkit.fileio.job_output`): interrupted or failed, an older job
    under ``prefix`` stays as it was; done, the older job's files that this one lacks are gone.
    """
    with job_output(prefix) as out:
        tasks, paths = plan_writes(prefix, plans, templates, chunk=chunk, out=out)
        run_writes(tasks, executor)
        write_groups(prefix, groups, out=out)
    return paths


def build_job(plans: Iterable[RankPlan], templates: Mapping[str, TraceTemplate], *,
              groups: ProcessGroups | Mapping[str, Iterable[int]] | None = None,
              prefix: str | None = None) -> Job:
    """The stamped job in memory (one columnar :class:`Trace` per rank); ``job.write(prefix)`` writes it."""
    pg = groups if isinstance(groups, ProcessGroups) else ProcessGroups.from_mapping(groups or {})
    traces = {plan.rank: templates[plan.role].trace(plan.params, path=f"<generated rank {plan.rank}>")
              for plan in plans}
    return Job(traces, pg, prefix)
