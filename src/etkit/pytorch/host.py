"""Reading PyTorch host execution traces (``ExecutionTraceObserver`` JSON), every schema 1.0.1 .. 1.1.1-chakra.1.0.0.

The reader normalises the two node layouts (1.0.1's flat keys, and the ``ctrl_deps``/``inputs{}``/``attrs[]``
layout of every later schema) into compact :class:`HostOp` records, chunk by chunk (see
:mod:`etkit.pytorch.jsonio`), so the parsed JSON of the whole file never sits in memory. IOInfo strings are
rendered once here as the Python ``str()`` the Chakra format expects; only collective ops keep their raw
argument lists (they are needed for message sizes, roots and peers).

A chunk of the later layout is decoded by msgspec straight into typed records (no dict per node or
attribute; shapes and types kept as their JSON text, whose ``str()`` is cached); a chunk that path cannot
take (anything malformed, an integer beyond 64 bits) goes through orjson's dicts, which report the fault.
Both give the same :class:`HostOp` records. The typed path's common nodes are made in C where etkit's
extension ``etkit.pytorch._hostops`` is built (``typed_op`` takes every other node, and all of them without it).
"""

from __future__ import annotations

import os
import re
from dataclasses import field
from functools import cache
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import EtkitError
from ..lazy import LazyModule
from ..records import record
from .jsonio import convert_element, read_array_document

try:  # the typed path's common nodes in C (optional: typed_op gives the same HostOps)
    from . import _hostops as KERNEL
except ImportError:  # pragma: no cover - built without a C compiler
    KERNEL = None

if TYPE_CHECKING:
    from . import host_typed as typed
else:  # msgspec, imported where a chunk takes the typed path (the C kernel's scan reads most nodes without it)
    typed = LazyModule("etkit.pytorch.host_typed", "typed", globals())

__all__ = ["HostOp", "HostTrace", "load_host_trace", "is_tensor", "tensor_keys", "HostTraceError", "KNOWN_SCHEMAS"]

#: Schemas seen in the wild; later ``1.x`` schemas with the same layout are accepted too.
KNOWN_SCHEMAS = ("1.0.1", "1.0.2-chakra.0.0.4", "1.0.3-chakra.0.0.4", "1.0.4-chakra.0.0.4",
                 "1.1.0-chakra.0.0.4", "1.1.1-chakra.0.0.4", "1.1.1-chakra.1.0.0")
#: The standard attributes every host op carries (in this order in the converted node).
STANDARD_ATTRS = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")
#: Attributes with a place of their own in HostOp (or always empty on CPU): not kept as extras.
_KNOWN_ATTRS = frozenset(STANDARD_ATTRS + ("op_schema", "kernel_backend", "kernel_file", "tensor_range"))


# (the two patterns are compiled on first use: a Kineto trace's host ops are HostOps made without them)
@cache
def _schema() -> re.Pattern[str]:
    return re.compile(r"^1\.\d+\.\d+")


@cache
def _keep_args() -> re.Pattern[str]:
    """Ops whose raw arguments are kept: collectives and their helpers (see etkit.pytorch.comm)."""
    return re.compile(r"^(c10d::|_c10d_functional::|c10d_functional::|gloo:|nccl:|record_param_comms|"
                      r"## process_group:init|ProcessGroup)")


class HostTraceError(EtkitError):
    """A host trace that cannot be read; the message names the file, rank, node and field."""


@record(slots=True)
class HostOp:
    """One host op, compacted. ``inputs``/``outputs`` hold raw values only for communication ops."""

    id: int
    name: str
    parent: int
    rf_id: int
    fw_parent: int
    seq_id: int
    scope: int
    tid: int
    fw_tid: int
    op_schema: str
    io: tuple[str, str, str, str, str, str]  # str() of in values/shapes/types, out values/shapes/types
    reads: tuple[tuple[int, int], ...]      # (tensor id, storage id) of input tensors
    writes: tuple[tuple[int, int], ...]     # same for outputs
    extra: dict[str, Any] | None = None     # non-standard, non-empty attrs (record_param_comms: pg_name, ...)
    inputs: list[Any] | None = None         # raw input values (communication ops only)
    input_types: list[str] | None = None
    outputs: list[Any] | None = None
    linked: tuple[float, float, float] | None = None  # (ts, inclusive_dur, exclusive_dur) of a linked trace
    gpu: tuple[str, int] | None = None                # (category, stream) of a GPU node in a linked trace


@record
class HostTrace:
    """A host ET: top-level metadata plus its ops in file order."""

    path: str
    schema: str
    pid: int
    time: str
    start_ts: int
    finish_ts: int
    ops: list[HostOp] = field(default_factory=list)
    rank: int | None = None

    @property
    def has_rf_ids(self) -> bool:
        return any(op.rf_id for op in self.ops)


def is_tensor(value: Any) -> bool:
    """Whether ``value`` is a host-ET tensor 6-tuple ``[tensor_id, storage_id, offset, numel, itemsize, device]``."""
    return (type(value) is list and len(value) == 6 and type(value[0]) is int and type(value[4]) is int
            and type(value[5]) is str)


def tensor_keys(values: Any, out: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Append ``(tensor_id, storage_id)`` of every tensor nested in the argument list ``values`` to ``out``."""
    if type(values) is not list:
        return out
    pending = [values]
    while pending:
        for item in pending.pop():
            if type(item) is list:
                # inlined is_tensor: this runs for every argument of every op
                if len(item) == 6 and type(item[5]) is str and type(item[0]) is int and type(item[1]) is int \
                        and type(item[4]) is int:
                    out.append((item[0], item[1]))
                elif item:
                    pending.append(item)
    return out


#: The range of an integer the ET can hold (int64 attributes; uint64 for ids and header times).
_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64 = (0, (1 << 64) - 1)


def _int(raw: dict[str, Any], key: str, default: int, where: str, bounds: tuple[int, int] = _INT64) -> int:
    value = raw.get(key, default)
    if value is None:
        return default
    if type(value) is not int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise HostTraceError(f"{where}: field {key!r} is {value!r}, not an integer")
    if not bounds[0] <= value <= bounds[1]:
        raise HostTraceError(f"{where}: field {key!r} is {value}, outside the range of a trace's integers "
                             f"({bounds[0]} .. {bounds[1]})")
    return value


def _float(raw: dict[str, Any], key: str, where: str) -> float:
    value = raw.get(key)
    if value is None:
        return float("nan")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HostTraceError(f"{where}: field {key!r} is {value!r}, not a number")
    return float(value)


class _Compactor:
    """Turns raw node dicts of one file into :class:`HostOp` records."""

    def __init__(self, where: str, flat: bool) -> None:
        self.where = where
        self.flat = flat
        self.strings: dict[str, str] = {}
        self.names: dict[Any, tuple[str, bool]] = {}  # op name -> (interned name, keeps raw arguments)
        self.type_strings: dict[tuple[Any, ...], str] = {}  # tuple(type list) -> its str()
        self.raw_strings: dict[bytes, tuple[str, bool]] = {}  # JSON text of shapes/types -> (its str(), a list?)

    def op(self, raw: Any) -> HostOp:
        """The HostOp of a parsed node (a dict, any layout)."""
        # Runs once per node of traces with millions of them: lookups are inlined and per-name facts cached.
        if type(raw) is not dict:
            raise HostTraceError(f"{self.where}: node is {type(raw).__name__}, not an object")
        get_raw = raw.get
        node_id = get_raw("id")
        if type(node_id) is not int or not 0 <= node_id <= _UINT64[1]:
            raise HostTraceError(f"{self.where}: node without an integer 'id' of at most 64 bits ({str(raw)[:80]})")
        named = self.named(get_raw("name"), node_id)
        if self.flat:
            attrs = raw
            parent = get_raw("parent", node_id)
            ins, in_shapes, in_types = get_raw("inputs", []), get_raw("input_shapes", []), get_raw("input_types", [])
            outs, out_shapes, out_types = (get_raw("outputs", []), get_raw("output_shapes", []),
                                           get_raw("output_types", []))
            extra = None
        else:
            parent = get_raw("ctrl_deps", node_id)
            attrs, extra = self.attrs(get_raw("attrs", ()), node_id)
            io = get_raw("inputs")
            if type(io) is dict:
                ins, in_shapes, in_types = io.get("values", []), io.get("shapes", []), io.get("types", [])
            else:
                ins, in_shapes, in_types = self.io(io, node_id, "inputs")
            io = get_raw("outputs")
            if type(io) is dict:
                outs, out_shapes, out_types = io.get("values", []), io.get("shapes", []), io.get("types", [])
            else:
                outs, out_shapes, out_types = self.io(io, node_id, "outputs")
        if type(ins) is not list or type(outs) is not list or type(in_types) is not list:
            raise HostTraceError(f"{self.where}: node {node_id}: 'inputs'/'outputs' are not lists")
        op = self.build(node_id, named, parent, attrs, extra, ins, outs,
                        self.io_strings(in_shapes, in_types, out_shapes, out_types), in_types)
        if "ts" in raw:  # a linked ("host + device") trace
            self.link_fields(op, raw)
        return op

    def named(self, name: Any, node_id: int) -> tuple[str, bool]:
        """The node's interned name, and whether its raw arguments are kept."""
        named = self.names.get(name) if type(name) is str else None
        if named is None:
            if type(name) is not str:
                raise HostTraceError(f"{self.where}: node {node_id}: field 'name' is missing or not a string")
            named = self.names[name] = (name, _keep_args().match(name) is not None)
        return named

    def build(self, node_id: int, named: tuple[str, bool], parent: Any, attrs: dict[str, Any],
              extra: dict[str, Any] | None, ins: list[Any], outs: list[Any], io_strings: tuple[str, str, str, str],
              in_types: list[Any] | None) -> HostOp:
        """The HostOp of a node's fields (``node_id``, ``named``, ``ins``, ``outs`` checked; ``parent``: the
        raw parent field; ``io_strings``: the str() of the input shapes, input types, output shapes, output
        types; ``in_types`` the input types, needed where the op's raw arguments are kept)."""
        name, keep = named
        if type(parent) is list and not self.flat:
            parent = parent[0] if parent else node_id
        get = attrs.get
        numbers = (parent, get("rf_id", 0), get("fw_parent", 0), get("seq_id", -1), get("scope", 0), get("tid", 0),
                   get("fw_tid", 0))
        p_, rf, fwp, seq, scope, tid, fwt = numbers
        if not (int is type(p_) is type(rf) is type(fwp) is type(seq) is type(scope) is type(tid) is type(fwt)) \
                or min(numbers) < _INT64[0] or max(numbers) > _INT64[1]:
            numbers = self.repair_numbers(attrs, numbers, node_id)  # type: ignore[assignment]
        op_schema = get("op_schema") or ""
        in_shapes, in_types_str, out_shapes, out_types_str = io_strings
        return HostOp(
            node_id, name, *numbers,
            self.strings.setdefault(op_schema, op_schema) if type(op_schema) is str else str(op_schema),
            (str(ins), in_shapes, in_types_str, str(outs), out_shapes, out_types_str),
            tuple(tensor_keys(ins, [])) if ins else (), tuple(tensor_keys(outs, [])) if outs else (),
            extra, ins if keep else None, in_types if keep else None, outs if keep else None)

    def io_strings(self, in_shapes: Any, in_types: Any, out_shapes: Any, out_types: Any) -> tuple[str, str, str, str]:
        """The str() of a node's parsed shapes and types (interned: they repeat from node to node)."""
        intern = self.strings.setdefault
        type_strings = self.type_strings
        try:  # type lists are lists of strings that repeat: str() once per distinct list
            in_key: tuple[Any, ...] | None = tuple(in_types)
            out_key = tuple(out_types) if type(out_types) is list else None
            in_types_str, out_types_str = type_strings.get(in_key), type_strings.get(out_key)  # type: ignore[arg-type]
        except TypeError:  # not strings (malformed, but still written as given)
            in_key = out_key = in_types_str = out_types_str = None
        if in_types_str is None:
            in_types_str = intern(str(in_types), str(in_types))
            if in_key is not None:
                type_strings[in_key] = in_types_str
        if out_types_str is None:
            out_types_str = intern(str(out_types), str(out_types))
            if out_key is not None:
                type_strings[out_key] = out_types_str
        in_shapes, out_shapes = str(in_shapes), str(out_shapes)
        return intern(in_shapes, in_shapes), in_types_str, intern(out_shapes, out_shapes), out_types_str

    def link_fields(self, op: HostOp, raw: dict[str, Any]) -> None:
        """The Kineto fields of a node of a linked trace (``ts`` and what comes with it)."""
        where = f"{self.where}: node {op.id}"
        op.linked = (_float(raw, "ts", where), _float(raw, "inclusive_dur", where),
                     _float(raw, "exclusive_dur", where))
        if raw.get("cat"):
            op.gpu = (str(raw["cat"]), _int(raw, "stream", 0, where))
            pg = raw.get("pg_name")
            if pg not in (None, ""):
                op.extra = {**(op.extra or {}), "pg_name": str(pg)}

    def typed_chunk(self, text: bytes) -> list[HostOp] | None:
        """The HostOps of a chunk of nodes (a JSON array, layout 1.0.2 and later) decoded by msgspec straight
        into :class:`~etkit.pytorch.host_typed.Node` records, no dict per node or attribute; ``None`` when this chunk needs the dict
        path (an integer of more than 64 bits, which orjson reads as a float; anything malformed, which the
        dict path then reports)."""
        if (KERNEL.long_number(text) if KERNEL is not None else _LONG_NUMBER in text.translate(_DIGITS_TO_ZERO)):
            return None
        try:
            nodes = typed.decode_nodes(text)
            if KERNEL is not None:  # the common nodes in C, the others by typed_op (the same HostOps)
                return KERNEL.ops(nodes, self.names, self.raw_strings, self.strings, _KNOWN_ATTRS, typed.UNSET,
                                  typed.EMPTY, HostOp, self.typed_op)
            return [self.typed_op(node) for node in nodes]
        except (typed.MsgspecError, RecursionError, HostTraceError, TypeError, orjson.JSONDecodeError):
            return None

    def scan(self, text: Any, pos: int, stop: int) -> tuple[list[HostOp], int, int]:
        """The HostOps of the nodes from ``pos`` on read straight from the document's ``text`` by the C kernel
        (see :meth:`etkit.pytorch.jsonio.JsonArrayDocument.converted`'s ``scan``): its common nodes made
        there as :meth:`typed_op` makes them, every other one by :meth:`slow_node`."""
        return KERNEL.scan(text, pos, stop, SCAN_NODES, self.names, self.raw_strings, self.strings, self.raw_string,
                           self.learn_name, self.slow_node, HostOp)

    def learn_name(self, name: str) -> tuple[str, bool]:
        """:meth:`named` of a name the C kernel has not seen before."""
        return self.named(name, -1)

    def slow_node(self, text: bytes) -> HostOp | None:
        """The HostOp of one node, given as its JSON text, as a chunk of it gives it (None: not JSON): by the
        dict path, the typed path's twin (for the few nodes the scan leaves, collectives mostly, msgspec's
        import would cost more than it saves)."""
        return convert_element(text, self.op)

    def typed_op(self, node: typed.Node) -> HostOp:
        """:meth:`op` of a decoded :class:`~etkit.pytorch.host_typed.Node` (the same HostOp; any fault raises, and the chunk is redone
        by :meth:`op`)."""
        node_id = node.id
        if type(node_id) is not int or not 0 <= node_id <= _UINT64[1]:
            raise HostTraceError("id")
        named = self.named(node.name, node_id)
        parent = node.ctrl_deps
        unset, empty = typed.UNSET, typed.EMPTY
        if parent is unset:
            parent = node_id
        attrs = {attr.name: attr.value for attr in node.attrs}
        io = node.inputs
        ins, in_shapes, in_types = (io.values, io.shapes, io.types) if io is not None else ([], empty, empty)
        io = node.outputs
        outs, out_shapes, out_types = (io.values, io.shapes, io.types) if io is not None else ([], empty, empty)
        if type(ins) is not list or type(outs) is not list:
            raise HostTraceError("inputs")
        found = self.raw_strings.get
        in_shapes_s, in_types_s, out_shapes_s, out_types_s = (  # unrolled: this runs for every node
            found(bytes(in_shapes)) or self.raw_string(in_shapes), found(bytes(in_types)) or self.raw_string(in_types),
            found(bytes(out_shapes)) or self.raw_string(out_shapes),
            found(bytes(out_types)) or self.raw_string(out_types))
        if not in_types_s[1]:
            raise HostTraceError("types")
        op = self.build(node_id, named, parent, attrs, _extra(attrs), ins, outs,
                        (in_shapes_s[0], in_types_s[0], out_shapes_s[0], out_types_s[0]),
                        orjson.loads(bytes(in_types)) if named[1] else None)
        if node.ts is not unset:
            self.link_fields(op, {key: value for key in typed.LINK_FIELDS
                                  if (value := getattr(node, key)) is not unset})
        return op

    def raw_string(self, raw: typed.Raw | bytes) -> tuple[str, bool]:
        """(str() of the JSON value ``raw``, whether it is a list), parsed by orjson and kept for the next node."""
        text = bytes(raw)
        value = orjson.loads(text)
        found = self.raw_strings[text] = (self.strings.setdefault(str(value), str(value)), type(value) is list)
        return found

    def repair_numbers(self, attrs: dict[str, Any], numbers: tuple[Any, ...], node_id: int) -> tuple[int, ...]:
        """Integral floats are accepted; anything else is an error naming the node and the field."""
        where = f"{self.where}: node {node_id}"
        fields = ("parent", "rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")
        return tuple(_int({name: value}, name, 0, where) for name, value in zip(fields, numbers))

    def attrs(self, raw_attrs: Any, node_id: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
        try:
            values = {attr["name"]: attr.get("value") for attr in raw_attrs}
        except (TypeError, KeyError, AttributeError):
            raise HostTraceError(f"{self.where}: node {node_id}: field 'attrs' is not a list of "
                                 "{name, type, value} objects") from None
        return values, _extra(values)

    def io(self, raw: Any, node_id: int, what: str) -> tuple[Any, Any, Any]:
        if raw is None:
            return [], [], []
        if type(raw) is not dict:
            raise HostTraceError(f"{self.where}: node {node_id}: field {what!r} is not an object")
        return raw.get("values", []), raw.get("shapes", []), raw.get("types", [])


def _extra(values: dict[str, Any]) -> dict[str, Any] | None:
    """A node's non-standard, non-empty attributes (None: none)."""
    if _KNOWN_ATTRS.issuperset(values):
        return None
    return {k: v for k, v in values.items() if k not in _KNOWN_ATTRS and v not in ("", None)} or None


#: 20 digits in a row (every digit made 0 first): possibly an integer beyond 64 bits, or just a long string
#: of digits (then the dict path reads it, to the same result). A regex costs 10x more.
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 20
#: Nodes the C kernel reads per call (between calls the reader lets go of the pages read).
SCAN_NODES = 4096


def load_host_trace(path: str | os.PathLike[str], *, rank: int | None = None) -> HostTrace:
    """Read a host ET JSON file (plain or gzip) of any supported schema."""
    label = f"{path}" + (f" (rank {rank})" if rank is not None else "")
    doc = read_array_document(path, "nodes")
    header = doc.header
    schema = header.get("schema")
    if not isinstance(schema, str) or not _schema().match(schema):
        raise HostTraceError(f"{label}: not a PyTorch host execution trace (schema {schema!r})")
    flat = schema.startswith("1.0.1")
    pid, start_ts, finish_ts = (_int(header, key, 0, label, _UINT64) for key in ("pid", "start_ts", "finish_ts"))
    trace = HostTrace(str(Path(path)), schema, pid, str(header.get("time") or ""), start_ts, finish_ts, rank=rank)
    compact = _Compactor(label, flat)
    ops = trace.ops
    for chunk in doc.converted(compact.op, fast=None if flat else compact.typed_chunk,
                               scan=None if flat or KERNEL is None else compact.scan):
        ops.extend(chunk)
    if not ops:
        raise HostTraceError(f"{label}: the trace has no nodes")
    _check_unique_ids(ops, label)
    return trace


def _check_unique_ids(ops: list[HostOp], label: str) -> None:
    """Node ids name ops in parents and tensor producers: two ops with one id make both ambiguous (the
    reference converter stops on them too)."""
    if len(set(map(attrgetter("id"), ops))) == len(ops):
        return
    first: dict[int, HostOp] = {}
    for op in ops:
        other = first.setdefault(op.id, op)
        if other is not op:
            raise HostTraceError(f"{label}: node {op.id}: field 'id' is used twice ({other.name!r} and "
                                 f"{op.name!r}); node ids must be unique")
