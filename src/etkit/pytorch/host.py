"""Reading PyTorch host execution traces (``ExecutionTraceObserver`` JSON), every schema 1.0.1 .. 1.1.1-chakra.1.0.0.

The reader normalises the two node layouts (1.0.1's flat keys, and the ``ctrl_deps``/``inputs{}``/``attrs[]``
layout of every later schema) into compact :class:`HostOp` records, chunk by chunk (see
:mod:`etkit.pytorch.jsonio`), so the parsed JSON of the whole file never sits in memory. IOInfo strings are
rendered once here as the Python ``str()`` the Chakra format expects; only collective ops keep their raw
argument lists (they are needed for message sizes, roots and peers).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EtkitError
from .jsonio import read_array_document

__all__ = ["HostOp", "HostTrace", "load_host_trace", "is_tensor", "tensor_keys", "HostTraceError", "KNOWN_SCHEMAS"]

#: Schemas seen in the wild; later ``1.x`` schemas with the same layout are accepted too.
KNOWN_SCHEMAS = ("1.0.1", "1.0.2-chakra.0.0.4", "1.0.3-chakra.0.0.4", "1.0.4-chakra.0.0.4",
                 "1.1.0-chakra.0.0.4", "1.1.1-chakra.0.0.4", "1.1.1-chakra.1.0.0")
#: The standard attributes every host op carries (in this order in the converted node).
STANDARD_ATTRS = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")
#: Attributes with a place of their own in HostOp (or always empty on CPU): not kept as extras.
_KNOWN_ATTRS = frozenset(STANDARD_ATTRS + ("op_schema", "kernel_backend", "kernel_file", "tensor_range"))
_SCHEMA = re.compile(r"^1\.\d+\.\d+")
#: Ops whose raw arguments are kept: collectives and their helpers (see etkit.pytorch.comm).
_KEEP_ARGS = re.compile(r"^(c10d::|_c10d_functional::|c10d_functional::|gloo:|nccl:|record_param_comms|"
                        r"## process_group:init|ProcessGroup)")


class HostTraceError(EtkitError):
    """A host trace that cannot be read; the message names the file, rank, node and field."""


@dataclass(slots=True)
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


@dataclass
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

    def op(self, raw: Any) -> HostOp:
        # Runs once per node of traces with millions of them: lookups are inlined and per-name facts cached.
        if type(raw) is not dict:
            raise HostTraceError(f"{self.where}: node is {type(raw).__name__}, not an object")
        get_raw = raw.get
        node_id = get_raw("id")
        if type(node_id) is not int or not 0 <= node_id <= _UINT64[1]:
            raise HostTraceError(f"{self.where}: node without an integer 'id' of at most 64 bits ({str(raw)[:80]})")
        name = get_raw("name")
        if type(name) is not str:
            raise HostTraceError(f"{self.where}: node {node_id}: field 'name' is missing or not a string")
        named = self.names.get(name)
        if named is None:
            named = self.names[name] = (name, _KEEP_ARGS.match(name) is not None)
        name, keep = named
        if self.flat:
            attrs = raw
            parent = get_raw("parent", node_id)
            ins, in_shapes, in_types = get_raw("inputs", []), get_raw("input_shapes", []), get_raw("input_types", [])
            outs, out_shapes, out_types = (get_raw("outputs", []), get_raw("output_shapes", []),
                                           get_raw("output_types", []))
            extra = None
        else:
            parent = get_raw("ctrl_deps", node_id)
            if type(parent) is list:
                parent = parent[0] if parent else node_id
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
        get = attrs.get
        numbers = (parent, get("rf_id", 0), get("fw_parent", 0), get("seq_id", -1), get("scope", 0), get("tid", 0),
                   get("fw_tid", 0))
        p_, rf, fwp, seq, scope, tid, fwt = numbers
        if not (int is type(p_) is type(rf) is type(fwp) is type(seq) is type(scope) is type(tid) is type(fwt)) \
                or min(numbers) < _INT64[0] or max(numbers) > _INT64[1]:
            numbers = self.repair_numbers(attrs, numbers, node_id)  # type: ignore[assignment]
        op_schema = get("op_schema") or ""
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
        op = HostOp(
            node_id, name, *numbers,
            intern(op_schema, op_schema) if type(op_schema) is str else str(op_schema),
            (str(ins), intern(in_shapes, in_shapes), in_types_str,
             str(outs), intern(out_shapes, out_shapes), out_types_str),
            tuple(tensor_keys(ins, [])) if ins else (), tuple(tensor_keys(outs, [])) if outs else (),
            extra, ins if keep else None, in_types if keep else None, outs if keep else None)
        if "ts" in raw:  # a linked ("host + device") trace
            where = f"{self.where}: node {node_id}"
            op.linked = (_float(raw, "ts", where), _float(raw, "inclusive_dur", where),
                         _float(raw, "exclusive_dur", where))
            if raw.get("cat"):
                op.gpu = (str(raw["cat"]), _int(raw, "stream", 0, where))
                pg = raw.get("pg_name")
                if pg not in (None, ""):
                    op.extra = {**(op.extra or {}), "pg_name": str(pg)}
        return op

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
        extra = None
        if not _KNOWN_ATTRS.issuperset(values):
            extra = {k: v for k, v in values.items() if k not in _KNOWN_ATTRS and v not in ("", None)} or None
        return values, extra

    def io(self, raw: Any, node_id: int, what: str) -> tuple[Any, Any, Any]:
        if raw is None:
            return [], [], []
        if type(raw) is not dict:
            raise HostTraceError(f"{self.where}: node {node_id}: field {what!r} is not an object")
        return raw.get("values", []), raw.get("shapes", []), raw.get("types", [])


def load_host_trace(path: str | os.PathLike[str], *, rank: int | None = None) -> HostTrace:
    """Read a host ET JSON file (plain or gzip) of any supported schema."""
    label = f"{path}" + (f" (rank {rank})" if rank is not None else "")
    doc = read_array_document(path, "nodes")
    header = doc.header
    schema = header.get("schema")
    if not isinstance(schema, str) or not _SCHEMA.match(schema):
        raise HostTraceError(f"{label}: not a PyTorch host execution trace (schema {schema!r})")
    flat = schema.startswith("1.0.1")
    pid, start_ts, finish_ts = (_int(header, key, 0, label, _UINT64) for key in ("pid", "start_ts", "finish_ts"))
    trace = HostTrace(str(Path(path)), schema, pid, str(header.get("time") or ""), start_ts, finish_ts, rank=rank)
    compact = _Compactor(label, flat)
    ops = trace.ops
    for chunk in doc.chunks():
        ops.extend(compact.op(raw) for raw in chunk)
    if not ops:
        raise HostTraceError(f"{label}: the trace has no nodes")
    _check_unique_ids(ops, label)
    return trace


def _check_unique_ids(ops: list[HostOp], label: str) -> None:
    """Node ids name ops in parents and tensor producers: two ops with one id make both ambiguous (the
    reference converter stops on them too)."""
    ids = [op.id for op in ops]
    if len(set(ids)) == len(ids):
        return
    first: dict[int, HostOp] = {}
    for op in ops:
        other = first.setdefault(op.id, op)
        if other is not op:
            raise HostTraceError(f"{label}: node {op.id}: field 'id' is used twice ({other.name!r} and "
                                 f"{op.name!r}); node ids must be unique")
