"""Vectorised decoding of whole ``.et`` files into columns, without a Python object per node.

The protobuf wire format is walked in lock-step over all records at once with numpy: step ``k``
decodes the ``k``-th field of every record that still has one. Nested attribute messages are walked
the same way, and packed dependency lists are decoded byte-parallel. The result is the hot columns
of :class:`etkit.model.trace.Trace`; everything else stays in the record bytes.

Where the package was built with a C compiler, the lean walk (the records, their IOInfo messages and attributes),
the string tables and the count of top-bit bytes run in C (``etkit.format._walk``, :data:`etkit.format.wire.KERNEL`):
one pass over each record instead of a numpy pass per field position, with the same results, errors included
(``tests/format/test_walk_kernel.py`` holds the two side by side).

Correctness guard: a file that protobuf rejects is never accepted here. A chunk of records is
either proven acceptable by the walk itself (every field, nested ones included, declared by the
schema and walked, every proto3 string ASCII: see :class:`_Proof`) or parsed by protobuf's C
runtime in one call. Whenever anything is unusual (bad wire types,
groups, over-long varints, hash collisions in the name table, invalid UTF-8), :func:`decode_columns`
returns ``None`` and the caller takes the record-by-record path, which produces the precise error.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import field as _field_default
from dataclasses import fields
from functools import lru_cache
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from ..arrays import distinct
from ..records import record
from . import schema, tags
from . import wire as _wire
from .attrwire import (
    INT_KIND,
    MISSING,
    ONEOF_WIRE_LUT,
    STRING_VAL,
    VALUE_FIELDS,
    int_values,
    plain_int,
    simple_attributes,
)
from .wire import (
    LOW_BYTES,
    MSBS,
    WireFault,
    bitwise_count,
    fixed,
    int64s,
    packed_varints,
    raise_packed_fault,
    varints,
    word_varints,
    word_view,
)

__all__ = ["NodeColumns", "Columns", "decode_columns", "join_columns", "split_columns", "rows_with_repeated_deps", "field_numbers", "WalkSpans", "HOT_INT_ATTRS", "HOT_ATTRS", "MISSING", "PAD"]

#: Integer attributes kept as columns (any integer or bool kind accepted).
HOT_INT_ATTRS = ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "comm_priority", "num_ops",
                 "tensor_size", "tid", "stream", "ts_ns", "dur_ns", "cat")
_HOT_NAMES = HOT_INT_ATTRS + ("is_cpu_op", "pg_name")
#: Every attribute the decoder can make a column of (``decode_columns``' ``attrs`` names some of them).
HOT_ATTRS = _HOT_NAMES
#: Spare bytes the lock-step walk may read past the last record (word-wide reads).
PAD = 32
_CHECK_CHUNK = 1 << 16
_U32 = np.uint64(0xFFFFFFFF)


@record(eq=False)
class NodeColumns:
    """The per-node columns every decoded form of a trace has (this list's one home): :class:`Columns` (the
    decoder's result) and :class:`etkit.model.trace.Trace` (which adds the metadata, the integer attribute
    columns one by one and the record bytes). Row ``i`` is the ``i``-th node; ``name_idx`` and ``pg_idx``
    index ``strings`` (-1: absent); ``data_ptr``/``ctrl_ptr`` are CSR offsets into ``data_deps``/``ctrl_deps``."""

    ids: np.ndarray
    types: np.ndarray
    name_idx: np.ndarray
    strings: list[str]
    start: np.ndarray
    duration: np.ndarray
    data_ptr: np.ndarray
    data_deps: np.ndarray
    ctrl_ptr: np.ndarray
    ctrl_deps: np.ndarray
    is_cpu_op: np.ndarray
    pg_idx: np.ndarray

    def node_columns(self) -> dict[str, Any]:
        """The :class:`NodeColumns` fields of this object by name (to build another form from it)."""
        return {name: getattr(self, name) for name in NODE_COLUMNS}


#: The field names of :class:`NodeColumns`, in order.
NODE_COLUMNS = tuple(f.name for f in fields(NodeColumns))


@record(eq=False)
class Columns(NodeColumns):
    """What the decoder gives: the :class:`NodeColumns` and the :data:`HOT_INT_ATTRS` columns by name."""

    ints: dict[str, np.ndarray]


@record
class _Fields:
    """Fields kept from a scan, in step-major order (a message's later fields come later)."""

    msg: np.ndarray  # which message (index into the start/end arrays)
    field: np.ndarray
    wire: np.ndarray
    value: np.ndarray  # varint value, fixed bits, or payload length for wire type 2
    offset: np.ndarray  # payload offset (wire type 2)
    step: np.ndarray  # position of the field inside its message

    @classmethod
    def concat(cls, parts: list[tuple[np.ndarray, ...]]) -> _Fields:
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, empty, np.zeros(0, dtype=np.uint64), empty, empty)
        return cls(*(np.concatenate(column) for column in zip(*parts)))


_BAD_WIRE = np.array([False, False, False, True, True, False, True, True])


def _step_fields(b: np.ndarray, words: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, ...]:
    """Tag and value/length varint of the fields at ``p``: (field, wire, q, value, advance)."""
    w = words[p]
    first = (w & np.uint64(0xFF)).astype(np.int64)
    if (first < 0x80).all():  # one-byte tags (every Node field): read the value from the same word
        tag = first
        q = p + 1
        second = (w >> np.uint64(8)) & np.uint64(0xFF)
        if (second < 0x80).all():  # one-byte values or lengths everywhere (most steps of a walk)
            return tag >> 3, tag & 7, q, second, np.ones(p.size, dtype=np.int64)
        value, advance = word_varints(w >> np.uint64(8), 7)
        wire = tag & 7
        long = np.flatnonzero((advance == 0) & ((wire == 0) | (wire == 2)))  # fixed-width values are read later
        if long.size:
            value[long], advance[long] = varints(b, q[long])
    else:
        tag_u, tag_len = varints(b, p)
        tag = tag_u.astype(np.int64)
        q = p + tag_len
        value, advance = varints(b, q)
    return tag >> 3, tag & 7, q, value, advance


def _scan(b: np.ndarray, start: np.ndarray, end: np.ndarray, keep: Callable[[np.ndarray, np.ndarray], np.ndarray],
          scalars: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], None],
          stop_above: int | None = None) -> _Fields:
    """Walk every field of every message ``b[start:end]`` in lock-step.

    Each step hands the step's fields to ``scalars(msgs, field, wire, value, offset)`` (which stores
    last-wins scalar fields straight into columns) and keeps the fields that ``keep(field, wire)``
    selects (repeated and nested ones) for the caller. The messages still being walked are kept
    compacted (``active``, ``p``, ``e``) rather than gathered from full-length arrays each step.
    With ``stop_above``, a message is left after its first field numbered higher than that (for
    messages whose fields are known to be in ascending order).
    """
    words = word_view(b)
    active = np.flatnonzero(start < end)
    p = start[active].astype(np.int64)
    e = end[active].astype(np.int64)
    out: list[tuple[np.ndarray, ...]] = []
    step = 0
    while active.size:
        field, wire, q, value, advance = _step_fields(b, words, p)  # varint value/length; fixed ones below
        if _BAD_WIRE[wire].any() or not field.all():
            raise WireFault("bad field")
        offset = q + advance
        m = wire == 2
        if m.any():
            length = value[m]
            if (length > np.uint64(1 << 40)).any():
                raise WireFault("implausible length")
            advance[m] += length.astype(np.int64)
        for wire_type, width in ((1, 8), (5, 4)):
            m = wire == wire_type
            if m.any():
                value[m], advance[m] = fixed(b, q[m], width), width
        new_pos = q + advance
        if (new_pos > e).any():
            raise WireFault("field runs past its message")
        scalars(active, field, wire, value, offset)
        m = keep(field, wire)
        if m.any():
            out.append((active[m], field[m], wire[m], value[m], offset[m], np.full(int(m.sum()), step)))
        going = new_pos < e
        if stop_above is not None:
            going &= field <= stop_above
        if going.all():
            p = new_pos
        else:
            active, p, e = active[going], new_pos[going], e[going]
        step += 1
    return _Fields.concat(out)


def _packed(b: np.ndarray, f: _Fields, number: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (ptr, values) of repeated uint64 field ``number`` (packed or not), in wire order."""
    mine = f.field == number
    packed = mine & (f.wire == 2) & (f.value > 0)
    single = mine & (f.wire == 0)
    seg_msg = f.msg[packed]
    seg_off = f.offset[packed]
    seg_len = f.value[packed].astype(np.int64)
    if seg_len.size:
        vals, per_seg = packed_varints(b, seg_off, seg_len)
        entry_msg = np.repeat(seg_msg, per_seg)
        entry_step = np.repeat(f.step[packed], per_seg)
    else:
        vals = np.zeros(0, dtype=np.uint64)
        entry_msg = entry_step = np.zeros(0, dtype=np.int64)
    all_msg = np.concatenate([entry_msg, f.msg[single]])
    all_step = np.concatenate([entry_step, f.step[single]])
    all_val = np.concatenate([vals, f.value[single]])
    order = np.lexsort((all_step, all_msg))  # stable: values of one segment keep their order
    counts = np.bincount(all_msg, minlength=n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, all_val[order]


def _window_keys(words: np.ndarray, off: np.ndarray, length: np.ndarray, width: int) -> np.ndarray:
    """The first ``width`` bytes of each string (zero past its length) as ``width // 8`` uint64 words."""
    out = np.empty((off.size, width // 8), dtype=np.uint64)
    for k in range(width // 8):
        out[:, k] = words[off + 8 * k] & LOW_BYTES[np.clip(length - 8 * k, 0, 8)]
    return out


_MIX_A, _MIX_B = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)


def _content_hashes(words: np.ndarray, off: np.ndarray, length: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each string's length and bytes (its words folded in one after the other)."""
    h: np.ndarray = length.astype(np.uint64) * _MIX_B
    rows: np.ndarray | None = None  # all of them while most strings still have words left
    k = 0
    with np.errstate(over="ignore"):
        while True:
            left = length - 8 * k if rows is None else length[rows] - 8 * k
            # (while every row is read, a string with no bytes left may point past the words: its mask is 0)
            at = np.minimum(off + 8 * k, words.size - 1) if rows is None else off[rows] + 8 * k
            w = words[at] & LOW_BYTES[np.clip(left, 0, 8)]
            if rows is None:
                h = (h ^ w) * _MIX_A
            else:
                h[rows] = (h[rows] ^ w) * _MIX_A
            k += 1
            more = left > 8
            if not more.any():
                return h
            if rows is None:
                if np.count_nonzero(more) * 2 < length.size:
                    rows = np.flatnonzero(more)
            else:
                rows = rows[more]


def _same_strings(words: np.ndarray, off: np.ndarray, other: np.ndarray, length: np.ndarray) -> bool:
    """Whether each string at ``off`` has the bytes of the one at ``other`` (both ``length`` long)."""
    rows = np.flatnonzero(off != other)
    k = 0
    while rows.size:
        mask = LOW_BYTES[np.minimum(length[rows] - 8 * k, 8)]
        if ((words[off[rows] + 8 * k] ^ words[other[rows] + 8 * k]) & mask).any():
            return False
        k += 1
        rows = rows[length[rows] > 8 * k]
    return True


def _string_table(buf: bytes, b: np.ndarray, off: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Index of each (off, length) string in a table of distinct strings (first-seen order).

    Strings are grouped by a 64-bit hash of their length and bytes, and every one is then compared with the
    first string of its group, so the table is exact (a collision raises :class:`WireFault`: the caller takes
    the record-by-record path). Where most of 64 or more strings are longer than 24 bytes (the hash then takes
    4 or more passes over them), a dictionary of their bytes gives the same index and table about 3x faster.
    """
    n = off.size
    if n == 0:
        return np.zeros(0, dtype=np.int32), []
    if _wire.KERNEL is not None:  # exact in C: no hash collision to give up on
        idx, first = _wire.KERNEL.strings(b, int64s(off), int64s(length))
        rows = np.frombuffer(first, dtype=np.int64)
        return (np.frombuffer(idx, dtype=np.int32),
                [buf[o:o + k].decode("utf-8") for o, k in zip(off[rows].tolist(), length[rows].tolist())])
    if n >= 64 and 2 * int(np.count_nonzero(length > 24)) >= n:
        index: dict[bytes, int] = {}
        at = np.fromiter((index.setdefault(buf[o:e], len(index)) for o, e in zip(off.tolist(), (off + length).tolist())),
                         dtype=np.int32, count=n)
        return at, [t.decode("utf-8") for t in index]
    return _hashed_table(buf, b, off, length)


def _hashed_table(buf: bytes, b: np.ndarray, off: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """:func:`_string_table` by the 64-bit hashes (``off`` not empty)."""
    n = off.size
    words = word_view(b)
    h = _content_hashes(words, off, length)
    order = np.argsort(h, kind="stable")  # a group's rows in row order: its first row first
    ordered = h[order]
    head = np.empty(n, dtype=bool)
    head[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=head[1:])
    group = np.cumsum(head) - 1  # of each sorted row
    first = order[head]  # each group's first row
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = group
    rep = first[inverse]
    if not (length[rep] == length).all() or not _same_strings(words, off, off[rep], length):
        raise WireFault("string hash collision")
    seen = np.argsort(first, kind="stable")  # the groups in first-seen order
    rank = np.empty_like(seen)
    rank[seen] = np.arange(seen.size)
    rows = first[seen]
    return rank[inverse].astype(np.int32), [buf[o:o + k].decode("utf-8") for o, k in zip(off[rows].tolist(), length[rows].tolist())]


_HOT_KEYS = np.array([np.frombuffer(n.encode().ljust(16, b"\0"), dtype=np.uint64) for n in _HOT_NAMES])
_HOT_LENS = np.array([len(n) for n in _HOT_NAMES], dtype=np.int64)


def _hash(keys: np.ndarray, length: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        hashed: np.ndarray = keys[:, 0] ^ (keys[:, 1] * np.uint64(0x9E3779B97F4A7C15)) ^ (length.astype(np.uint64) << np.uint64(56))
    return hashed


_HOT_HASH = _hash(_HOT_KEYS, _HOT_LENS)
_HOT_ORDER = np.argsort(_HOT_HASH)


def _hot_name_ids(keys: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Index into ``_HOT_NAMES`` of each attribute name (its first 16 bytes and length), or -1."""
    h = _hash(keys, length)
    sorted_hash = _HOT_HASH[_HOT_ORDER]
    pos = np.minimum(np.searchsorted(sorted_hash, h), sorted_hash.size - 1)
    ids = np.where(sorted_hash[pos] == h, _HOT_ORDER[pos], -1)
    cand = ids >= 0
    exact = np.zeros(ids.size, dtype=bool)
    exact[cand] = ((keys[cand] == _HOT_KEYS[ids[cand]]).all(axis=1)) & (length[cand] == _HOT_LENS[ids[cand]])
    return np.where(exact, ids, -1)


@record(frozen=True, eq=False)
class _Hot:
    """The hot attributes one decode makes columns of (:func:`_hot`): the integer ones, in
    :data:`HOT_INT_ATTRS` order, are rows ``0..len(ints)-1`` of ``int_rows``; ``cpu`` and ``pg`` are the ids
    of ``is_cpu_op`` and ``pg_name`` (-1: not decoded). ``remap[i]`` is the id of ``_HOT_NAMES[i]`` (-1: not
    decoded; ``remap[-1]`` is -1, for names that are not hot). ``slot_*``: the lean walk's lookup table of
    the decoded names (:func:`_lean_hot_ids`)."""

    ints: tuple[str, ...]
    cpu: int
    pg: int
    deps: bool  # the dependency lists decoded (False: checked only, the columns left empty)
    remap: np.ndarray
    identity: bool
    slot_mult: np.uint64
    slot_shift: np.uint64
    slot_w0: np.ndarray
    slot_w1: np.ndarray
    slot_id: np.ndarray


#: The lean lookup table has ``1 << _SLOT_BITS`` slots.
_SLOT_BITS = 8


@lru_cache(maxsize=16)
def _hot(attrs: frozenset[str] | None, deps: bool = True) -> _Hot:
    """The :class:`_Hot` of the attribute names ``attrs`` (None: all of :data:`HOT_ATTRS`) and ``deps``."""
    wanted = _HOT_NAMES if attrs is None else tuple(name for name in _HOT_NAMES if name in attrs)
    ints = tuple(name for name in wanted if name in HOT_INT_ATTRS)
    ids = {name: i for i, name in enumerate(ints)}
    cpu = len(ints) if "is_cpu_op" in wanted else -1
    pg = len(ints) + 1 if "pg_name" in wanted else -1
    ids.update({name: i for name, i in (("is_cpu_op", cpu), ("pg_name", pg)) if i >= 0})
    remap = np.array([ids.get(name, -1) for name in _HOT_NAMES] + [-1], dtype=np.int64)
    keys = []
    for name in wanted:  # the attribute's first two words as the lean walk reads them: tag 0a, length, name
        raw = bytes([tags.ATTR_NAME, len(name)]) + name.encode()
        keys.append((int.from_bytes(raw[:8].ljust(8, b"\0"), "little"), int.from_bytes(raw[8:16].ljust(8, b"\0"), "little"),
                     ids[name]))
    if max(len(n) for n in _HOT_NAMES) > 14:
        raise AssertionError("hot attribute names must fit the lean walk's first two words")
    size = 1 << _SLOT_BITS
    shift = 64 - _SLOT_BITS
    for k in range(1, 1 << 16):  # a multiplier that gives each decoded name a slot of its own (the first odd one that does)
        mult = (0x9E3779B97F4A7C15 * k) & 0xFFFFFFFFFFFFFFFF | 1
        slots = [((w0 * mult) & 0xFFFFFFFFFFFFFFFF) >> shift for w0, _, _ in keys]
        if len(set(slots)) == len(slots):
            break
    else:
        raise AssertionError("no multiplier separates the hot attribute names")
    slot_w0 = np.zeros(size, dtype=np.uint64)  # 0: no name (every attribute's first byte is its tag 0a)
    slot_w1 = np.zeros(size, dtype=np.uint64)
    slot_id = np.full(size, -1, dtype=np.int64)
    for slot, (w0, w1, i) in zip(slots, keys):
        slot_w0[slot], slot_w1[slot], slot_id[slot] = w0, w1, i
    return _Hot(ints, cpu, pg, deps, remap, attrs is None, np.uint64(mult), np.uint64(shift), slot_w0, slot_w1, slot_id)


def _keep_nothing(field: np.ndarray, wire: np.ndarray) -> np.ndarray:
    return np.zeros(field.size, dtype=bool)


def _attributes(buf: bytes, b: np.ndarray, f: _Fields, n: int, int_rows: np.ndarray,
                proof: _Proof, hot: _Hot) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``is_cpu_op``, ``pg_name`` (index into the returned strings) per node; fills ``int_rows``.

    ``int_rows[k, row]`` receives the integer attribute ``HOT_INT_ATTRS[k]`` of node ``row`` (it holds
    MISSING on entry). Tells ``proof`` what the walk of the attributes saw.
    """
    attr = np.flatnonzero((f.field == 10) & (f.wire == 2))  # step-major: a node's attributes in wire order
    a_start = f.offset[attr]
    owner = f.msg[attr]
    a_end = a_start + f.value[attr].astype(np.int64)
    cpu = np.full(n, -1, dtype=np.int8)
    pg = np.full(n, -1, dtype=np.int32)
    if owner.size == 0:
        return cpu, pg, []
    na = owner.size
    name_len = np.zeros(na, dtype=np.int64)
    name_off = np.zeros(na, dtype=np.int64)
    kind = np.zeros(na, dtype=np.int64)
    value = np.zeros(na, dtype=np.uint64)
    v_off = np.zeros(na, dtype=np.int64)

    simple, _ = simple_attributes(b, a_start, a_end, name_off, name_len, kind, value, v_off)  # names alone: below
    proof.fields(_ATTR_WIRES, kind[simple], ONEOF_WIRE_LUT[kind[simple]])  # the simple ones' value fields
    proof.strings(name_off[simple], name_len[simple])
    text = simple & (kind == STRING_VAL)
    proof.strings(v_off[text], value[text])
    rest = np.flatnonzero(~simple)
    if rest.size:
        def store(msgs: np.ndarray, field: np.ndarray, wire: np.ndarray, val: np.ndarray, off: np.ndarray) -> None:
            proof.fields(_ATTR_WIRES, field, wire)
            m = (wire == 2) & np.isin(field, _ATTR_STRINGS)
            proof.strings(off[m], val[m])
            msgs = rest[msgs]
            m = (field == 1) & (wire == 2)
            name_len[msgs[m]], name_off[msgs[m]] = val[m].astype(np.int64), off[m]
            m = ONEOF_WIRE_LUT[np.minimum(field, 33)] == wire
            kind[msgs[m]], value[msgs[m]], v_off[msgs[m]] = field[m], val[m], off[m]

        _scan(b, a_start[rest], a_end[rest], _keep_nothing, store)
    name_id = _hot_name_ids(_window_keys(word_view(b), name_off, np.minimum(name_len, 16), 16), name_len)
    if not hot.identity:
        name_id = hot.remap[name_id]
    return _hot_columns(buf, b, owner, name_id, kind, value, v_off, int_rows, hot)


def _hot_columns(buf: bytes, b: np.ndarray, owner: np.ndarray, name_id: np.ndarray, kind: np.ndarray,
                 value: np.ndarray, v_off: np.ndarray, int_rows: np.ndarray, hot: _Hot
                 ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``is_cpu_op`` and ``pg_name`` (index into the returned strings) per node from its attributes (in wire
    order: node ``owner``, the name's id in ``hot`` or -1, oneof member, raw value, value offset); fills
    ``int_rows`` (a row per integer attribute of ``hot``) with the integer ones. Both walks decode their
    attributes into these arrays."""
    n = int_rows.shape[1]
    cpu = np.full(n, -1, dtype=np.int8)
    pg = np.full(n, -1, dtype=np.int32)
    kept = np.flatnonzero(name_id >= 0)
    owner, name_id, kind, value, v_off = owner[kept], name_id[kept], kind[kept], value[kept], v_off[kept]
    is_int = INT_KIND[kind]
    int_val = int_values(kind, value)
    m = is_int & (name_id < len(hot.ints))  # integer columns: one scatter into the rows of int_rows (last wins)
    int_rows[name_id[m], owner[m]] = int_val[m]
    if hot.cpu >= 0:
        m = is_int & (name_id == hot.cpu)
        cpu[owner[m]] = (int_val[m] != 0).astype(np.int8)
    pg_rows = np.flatnonzero(name_id == hot.pg) if hot.pg >= 0 else np.zeros(0, dtype=np.int64)
    strings = _pg_column(buf, b, pg_rows, owner, kind, value, v_off, is_int, pg) if pg_rows.size else []
    return cpu, pg, strings


def _pg_column(buf: bytes, b: np.ndarray, rows: np.ndarray, owner: np.ndarray, kind: np.ndarray, value: np.ndarray,
               v_off: np.ndarray, is_int: np.ndarray, pg: np.ndarray) -> list[str]:
    """Fill ``pg`` (per node: index into the returned table) from the ``pg_name`` attributes ``rows``.

    String values (the norm) go through the vectorised string table; the rare integer ones are
    formatted one by one. Attributes are in wire order, so a node's last ``pg_name`` wins.
    """
    text = np.full(rows.size, -1, dtype=np.int64)
    is_str = kind[rows] == STRING_VAL
    sel = rows[is_str]
    text[is_str], strings = _string_table(buf, b, v_off[sel], value[sel].astype(np.int64))
    table = {s: i for i, s in enumerate(strings)}
    for j in np.flatnonzero(~is_str & is_int[rows]).tolist():
        i = int(rows[j])
        text[j] = table.setdefault(str(plain_int(int(kind[i]), int(value[i]))), len(table))
    valid = text >= 0
    pg[owner[rows[valid]]] = text[valid]
    return list(table)


def _check_with_protobuf(buf: bytes, frame_start: np.ndarray, rec_end: np.ndarray) -> None:
    """Parse the records with protobuf's C runtime, many per call; raises WireFault if any is invalid.

    The records are frames; what lies between two of them (the GlobalMetadata frame of the next file
    where several files were joined) is passed over as an unknown field."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    for i in range(0, frame_start.size, _CHECK_CHUNK):
        j = min(i + _CHECK_CHUNK, frame_start.size)
        base = int(frame_start[i])
        piece = arr[base:int(rec_end[j - 1])]
        gaps = np.flatnonzero(frame_start[i + 1:j] != rec_end[i:j - 1])
        if gaps.size:
            at = np.concatenate([frame_start[i:j], rec_end[i:j - 1][gaps]]) - base
            keys = np.concatenate([np.full(j - i, tags.BATCH_NODES, dtype=np.uint8),  # a gap: an unknown field 2
                                   np.full(gaps.size, tags.BATCH_NODES + 8, dtype=np.uint8)])
            order = np.argsort(at, kind="stable")
            wrapped = np.insert(piece, at[order], keys[order])
        else:
            wrapped = np.insert(piece, frame_start[i:j] - base, tags.BATCH_NODES)
        try:
            schema.NodeBatch.FromString(wrapped.data)  # a buffer, not a bytes copy
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise WireFault(str(exc)) from None


def _keep_deps(field: np.ndarray, wire: np.ndarray) -> np.ndarray:
    kept: np.ndarray = (field == 4) | (field == 5)
    return kept


def _store_nothing(*_: np.ndarray) -> None:
    pass


def rows_with_repeated_deps(padded: bytes, rec_off: np.ndarray, rec_end: np.ndarray, *,
                            fields_in_order: bool = False) -> np.ndarray | None:
    """Rows among the Node records ``padded[rec_off:rec_end]`` whose data or ctrl deps list a value twice.

    ``padded`` must end with at least ``PAD`` spare bytes. ``fields_in_order`` (the records' fields
    are in ascending number order, as protobuf serialises known fields) stops the walk of a record
    after its deps. ``None`` when the records are too unusual for the lock-step walk (the caller
    then checks them one by one).
    """
    b = np.frombuffer(padded, dtype=np.uint8)
    try:
        f = _scan(b, rec_off, rec_end, _keep_deps, _store_nothing, stop_above=5 if fields_in_order else None)
        repeated = []
        for number in (4, 5):
            ptr, values = _packed(b, f, number, rec_off.size)
            counts = np.diff(ptr)
            if values.size < 2 or counts.max() < 2:
                continue
            owner = np.repeat(np.arange(rec_off.size), counts)
            listed = counts[owner] > 1  # only lists of two or more can repeat a value
            owner, values = owner[listed], values[listed]
            order = np.lexsort((values, owner))
            owner, values = owner[order], values[order]
            same = (owner[1:] == owner[:-1]) & (values[1:] == values[:-1])
            repeated.append(owner[1:][same])
    except (WireFault, ValueError, IndexError):
        return None
    return distinct(np.concatenate(repeated)) if repeated else np.zeros(0, dtype=np.int64)


def field_numbers(record: bytes) -> list[int]:
    """Numbers of the top-level fields of one message, in wire order (raises ValueError if malformed)."""
    numbers: list[int] = []

    def note(msgs: np.ndarray, field: np.ndarray, *_: np.ndarray) -> None:
        numbers.extend(field.tolist())

    try:
        _scan(np.frombuffer(record + bytes(PAD), dtype=np.uint8), np.zeros(1, dtype=np.int64),
              np.full(1, len(record), dtype=np.int64), _keep_nothing, note)
    except WireFault as exc:
        raise ValueError(str(exc)) from None
    return numbers


#: Node scalar fields read as varints, in the order of the rows of ``_decode_chunk``'s scalars.
_SCALAR_FIELDS = (1, 3, 6, 7)
#: Row of a field's value in those scalars, indexed by field number (capped) for wire type 0, and
#: the same offset by its size for any other wire type (-1: not a scalar column).
_SPAN = 16
_SCALAR_SLOT = np.full(2 * _SPAN, -1, dtype=np.int64)
_SCALAR_SLOT[list(_SCALAR_FIELDS)] = np.arange(len(_SCALAR_FIELDS))


def _keep_node_lists(field: np.ndarray, wire: np.ndarray) -> np.ndarray:
    """Node fields kept for later passes: deps (4, 5), inputs and outputs (8, 9) and attributes (10)."""
    kept: np.ndarray = (field == 4) | (field == 5) | (((field == 8) | (field == 9) | (field == 10)) & (wire == 2))
    return kept


def _wire_table(wires: dict[int, tuple[int, ...]]) -> np.ndarray:
    """``table[min(number, 33), wire]``: a field the schema declares, with a wire type protobuf parses it from."""
    table = np.zeros((34, 8), dtype=bool)
    for number, allowed in wires.items():
        table[number, list(allowed)] = True
    return table


#: The fields of Node, IOInfo and AttributeProto, each with the wire types it is parsed from (packed
#: or not for the dep lists). Attribute list members (even numbers 4..32) are nested messages that
#: the walk does not enter, so they are left out: a record holding one is checked by protobuf.
_NODE_WIRES = _wire_table({1: (0,), 2: (2,), 3: (0,), 4: (0, 2), 5: (0, 2), 6: (0,), 7: (0,), 8: (2,), 9: (2,),
                           10: (2,)})
_IOINFO_WIRES = _wire_table({1: (2,), 2: (2,), 3: (2,)})
_ATTR_WIRES = _wire_table({1: (2,), 2: (2,), 3: (1,), 5: (5,), 29: (2,), 31: (2,),
                           **{number: (wire,) for number, (wire, _) in VALUE_FIELDS.items()}})
#: Attribute fields that are proto3 strings (protobuf rejects them unless valid UTF-8).
_ATTR_STRINGS = (1, 2, STRING_VAL)


class _Proof:
    """What the walk of a chunk of records saw of everything protobuf's parser checks.

    A chunk is *proven* when every field of every record, and of every message nested in one, is a
    field the schema declares with a wire type protobuf parses it from (so no field was skipped
    unwalked and there is no nested message the walk did not enter), and every proto3 string is
    ASCII (so valid UTF-8). The walk itself has then checked the rest (tags, varints, lengths inside
    their message, packed lists), and protobuf would accept the chunk. Any other chunk is parsed by
    protobuf, which also settles the rare non-ASCII strings.
    """

    def __init__(self) -> None:
        self.declared = True
        self._offsets: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []

    def fields(self, table: np.ndarray, field: np.ndarray, wire: np.ndarray) -> None:
        """Note fields the walk read (of one message type, whose declared fields ``table`` lists)."""
        if self.declared and not table[np.minimum(field, 33), wire].all():
            self.declared = False

    def strings(self, offset: np.ndarray, length: np.ndarray) -> None:
        """Note proto3 strings the walk found (byte offsets into the chunk's buffer, lengths)."""
        self._offsets.append(offset)
        self._lengths.append(length.astype(np.int64))

    def holds(self, b: np.ndarray) -> bool:
        """Whether the chunk is proven: no string has a byte with its top bit set (one pass over the strings'
        bytes: ``reduceat`` over their spans, which never overlap)."""
        if not self.declared:
            return False
        if not self._offsets:
            return True
        start, length = np.concatenate(self._offsets), np.concatenate(self._lengths)
        keep = length > 0
        start, length = start[keep], length[keep]
        if not start.size:
            return True
        bounds = np.empty(2 * start.size, dtype=np.int64)  # start, end, start, end, ... in buffer order
        bounds[0::2] = np.sort(start)
        bounds[1::2] = np.sort(start + length)  # spans that never overlap: sorted ends pair with sorted starts
        lo, hi = int(bounds[0]), int(bounds[-1])  # the chunk's part of the buffer
        segment = (b[lo:hi + 1] >= 0x80).view(np.uint8)
        high = np.add.reduceat(segment, np.minimum(bounds - lo, segment.size - 1), dtype=np.int64)[::2]
        return not high.any()


@record
class WalkSpans:
    """What the lean walk of a chunk of records found besides the columns, for callers that read the rest of
    the records (:func:`etkit.format.parts.walked_parts`): rows index the records, offsets the buffer.

    ``io``: per side (inputs, outputs), the rows, offsets and lengths of the IOInfo fields (wire order);
    ``io_texts``: per side, the strings inside those messages: (index into that side's ``io`` entries, tag,
    offset, length), in walk order (a message's in wire order); ``attr_row``, ``attr_off``,
    ``attr_len``: every attribute message, in walk order (by ``attr_step``, the field's position in its
    record, then by row); ``attrs``: their decoding (None: no attributes)."""

    io: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    io_texts: list[tuple[np.ndarray, ...]]
    attr_row: np.ndarray
    attr_off: np.ndarray
    attr_len: np.ndarray
    attr_step: np.ndarray
    attrs: _LeanAttrs | None


def _shift_spans(spans: list[WalkSpans | None] | None, rows: int, offset: int) -> None:
    """The last chunk's :class:`WalkSpans` (rows and offsets of the chunk) made rows and offsets of the whole."""
    last = spans[-1] if spans else None
    if last is None or not (rows or offset):
        return
    last.io = [(r + rows, o + offset, k) for r, o, k in last.io]
    last.io_texts = [(m, tag, o + offset, k) for m, tag, o, k in last.io_texts]
    last.attr_row, last.attr_off = last.attr_row + rows, last.attr_off + offset
    if last.attrs is not None:
        last.attrs.v_off = last.attrs.v_off + offset


#: Records decoded together: the working arrays of one chunk stay in the CPU caches.
_DECODE_CHUNK = 1 << 14
#: Files up to this size are decoded from a padded copy in one pass (the copy costs less than the separate
#: pass over the last records that bigger files take, read in place).
_PADDED_COPY = 1 << 24


def decode_columns(buf: bytes, frame_start: np.ndarray, rec_off: np.ndarray, rec_len: np.ndarray, *,
                   names: bool = True, spans: list[WalkSpans | None] | None = None,
                   attrs: Collection[str] | None = None, deps: bool = True) -> Columns | None:
    """Hot columns of the node records ``buf[rec_off:rec_off+rec_len]``; ``None`` = take the slow path.

    ``frame_start`` is where each record's length prefix begins (the records must be contiguous frames).
    ``names=False`` skips the name table, the costliest column that validation never reads: every
    ``name_idx`` is then -1 and ``strings`` holds only the ``pg_name`` values (the records are still
    checked exactly as with names).
    ``attrs``: the attributes of :data:`HOT_ATTRS` to make columns of (default: all); ``ints`` then holds only
    the integer ones named, and ``is_cpu_op``/``pg_idx`` are -1 throughout unless named (the records are
    checked the same). ``deps=False``: the dependency lists are checked as they are for decoding, but
    ``data_deps``/``ctrl_deps`` are left empty (every list empty) where the lean walk takes the records.
    Records are decoded in chunks of ``_DECODE_CHUNK`` (the working arrays of one stay in the CPU
    caches) whose columns are then joined.
    ``spans``: a list that receives, per chunk in record order, the :class:`WalkSpans` the lean walk found
    (rows and offsets of the whole ``rec_off``/``buf``), or None for a chunk it did not take; on a None
    return it ends in None too. Nothing else changes with it.
    """
    n = rec_off.size
    try:
        rec_end = rec_off + rec_len
        # Word-wide reads run up to PAD bytes past a record: records that end that far before the end
        # of the file are read in place, the last few from a padded copy of the file's tail.
        b = np.frombuffer(buf, dtype=np.uint8)
        body = int(np.searchsorted(rec_end, len(buf) - PAD, side="right"))
        if body < n and len(buf) <= _PADDED_COPY:  # one pass over a padded copy instead of a second one for the tail
            buf = buf + bytes(PAD)
            b = np.frombuffer(buf, dtype=np.uint8)
            body = n
        hot = _hot(None if attrs is None else frozenset(attrs), deps)
        int_rows = np.full((len(hot.ints), n), MISSING, dtype=np.int64)  # filled in place, never joined
        parts = []
        for i in range(0, body, _DECODE_CHUNK):
            j = min(i + _DECODE_CHUNK, body)
            part, proven = _decode_chunk(buf, b, rec_off[i:j], rec_end[i:j], int_rows[:, i:j], names, spans, hot)
            _shift_spans(spans, i, 0)
            if not proven:
                _check_with_protobuf(buf, frame_start[i:j], rec_end[i:j])
            parts.append(part)
        if body < n or not parts:
            base = int(rec_off[body]) if body < n else 0
            tail = buf[base:]
            part, proven = _decode_chunk(tail, np.frombuffer(tail + bytes(PAD), dtype=np.uint8), rec_off[body:] - base,
                                         rec_end[body:] - base, int_rows[:, body:], names, spans, hot)
            _shift_spans(spans, body, base)
            if not proven and body < n:
                _check_with_protobuf(buf, frame_start[body:], rec_end[body:])
            parts.append(part)
    except (WireFault, UnicodeDecodeError, ValueError, IndexError):
        if spans is not None:
            spans.append(None)
        return None
    return parts[0] if len(parts) == 1 else join_columns(parts, dict(zip(hot.ints, int_rows)))


def _decode_chunk(buf: bytes, b: np.ndarray, rec_off: np.ndarray, rec_end: np.ndarray, int_rows: np.ndarray,
                  names: bool = True, spans: list[WalkSpans | None] | None = None, hot: _Hot | None = None
                  ) -> tuple[Columns, bool]:
    """Columns of the records ``b[rec_off:rec_end]`` (offsets into the whole file; raises WireFault).

    Also whether the walk proved that protobuf accepts these records. The lean walk (:func:`_lean_chunk`)
    takes the records that Chakra's producers write; the generic one (:class:`_Proof`) everything else.
    ``spans``: the lean walk's :class:`WalkSpans` of the chunk is appended (None after the generic walk).
    """
    try:
        return _lean_chunk(buf, b, rec_off, rec_end, int_rows, names, spans, hot)
    except _Unusual:
        if spans is not None:
            spans.append(None)
        return _generic_chunk(buf, b, rec_off, rec_end, int_rows, names, hot)


def _generic_chunk(buf: bytes, b: np.ndarray, rec_off: np.ndarray, rec_end: np.ndarray, int_rows: np.ndarray,
                   names: bool = True, hot: _Hot | None = None) -> tuple[Columns, bool]:
    """:func:`_decode_chunk` by the generic walk: any field order, unknown fields, list attributes."""
    n = rec_off.size
    hot = hot or _hot(None)
    proof = _Proof()
    scalars = np.zeros((len(_SCALAR_FIELDS), n), dtype=np.uint64)  # raw varints of id, type, start, duration
    name_off = np.zeros(n, dtype=np.int64)
    name_len = np.zeros(n, dtype=np.int64)

    def store(msgs: np.ndarray, field: np.ndarray, wire: np.ndarray, val: np.ndarray, off: np.ndarray) -> None:
        proof.fields(_NODE_WIRES, field, wire)
        slot = _SCALAR_SLOT[np.minimum(field, _SPAN - 1) + np.where(wire == 0, 0, _SPAN)]
        m = slot >= 0
        if m.all():
            scalars[slot, msgs] = val
        else:
            scalars[slot[m], msgs[m]] = val[m]
            m = (wire == 2) & (field == 2)
            name_off[msgs[m]], name_len[msgs[m]] = off[m], val[m].astype(np.int64)
            proof.strings(off[m], val[m])

    def io_store(msgs: np.ndarray, field: np.ndarray, wire: np.ndarray, val: np.ndarray, off: np.ndarray) -> None:
        proof.fields(_IOINFO_WIRES, field, wire)
        m = wire == 2
        proof.strings(off[m], val[m])

    f = _scan(b, rec_off, rec_end, _keep_node_lists, store)
    io = np.flatnonzero(((f.field == 8) | (f.field == 9)) & (f.wire == 2))
    _scan(b, f.offset[io], f.offset[io] + f.value[io].astype(np.int64), _keep_nothing, io_store)
    ids, raw_type, start, duration = scalars
    types = (raw_type & _U32).astype(np.uint32).view(np.int32)
    if names:
        name_idx, strings = _string_table(buf, b, name_off, name_len)
    else:
        name_idx, strings = np.full(n, -1, dtype=np.int32), []
    ctrl_ptr, ctrl_deps = _packed(b, f, 4, n)
    data_ptr, data_deps = _packed(b, f, 5, n)
    cpu, pg, pg_strings = _attributes(buf, b, f, n, int_rows, proof, hot)
    if pg_strings:
        pg = _remapped(pg, _merged(strings, pg_strings))
    columns = Columns(ids, types, name_idx, strings, start, duration, data_ptr, data_deps, ctrl_ptr, ctrl_deps,
                      cpu, pg, dict(zip(hot.ints, int_rows)))
    return columns, proof.holds(b)


# -- the lean walk ------------------------------------------------------------------------------------
#
# What Chakra's producers write (etkit, Chakra's converters, ASTRA-sim's and STAGE's generators) has a
# narrow shape: one-byte Node tags, IOInfo messages of three strings, attributes that are a name and
# at most one scalar value. The lean walk takes exactly that shape with a fraction of the generic walk's
# array operations (each step handles its fields grouped by tag, the common one- and two-byte varints
# are read from the word already loaded, attributes are decoded in one pass) and proves the records
# without visiting their strings: a record's bytes are tags, varints, fixed-width values and string
# contents; the walk knows how many bytes with the top bit set the first three hold (a varint of ``k``
# bytes has ``k - 1``), so the strings are all ASCII exactly when the records hold no more than that
# (one count over the records' bytes). Anything else raises :class:`_Unusual` and the chunk takes the
# generic walk.


class _Unusual(Exception):
    """Records outside the lean walk's shape (the generic walk takes them)."""


_FF = np.uint64(0xFF)
_SEVEN = np.uint64(7)
_EIGHT = np.uint64(8)
_LENGTH_LIMIT = np.uint64(1 << 40)
#: Node tags (field number << 3 | wire type) the lean walk takes.
_TAG_ID, _TAG_NAME, _TAG_TYPE, _TAG_START, _TAG_DURATION = tags.NODE_ID, tags.NODE_NAME, tags.NODE_TYPE, tags.NODE_START, tags.NODE_DURATION
_TAG_CTRL, _TAG_DATA, _TAG_CTRL_ONE, _TAG_DATA_ONE = tags.NODE_CTRL, tags.NODE_DATA, tags.NODE_CTRL_ONE, tags.NODE_DATA_ONE
_TAG_INPUTS, _TAG_OUTPUTS, _TAG_ATTR = tags.NODE_INPUTS, tags.NODE_OUTPUTS, tags.NODE_ATTR
_SCALAR_ROW = {_TAG_ID: 0, _TAG_TYPE: 1, _TAG_START: 2, _TAG_DURATION: 3}
_SPAN_TAGS = (_TAG_NAME, _TAG_CTRL, _TAG_DATA, _TAG_INPUTS, _TAG_OUTPUTS, _TAG_ATTR)
_LEAN_NODE_TAGS = np.zeros(256, dtype=bool)
_LEAN_NODE_TAGS[[*_SCALAR_ROW, *_SPAN_TAGS, _TAG_CTRL_ONE, _TAG_DATA_ONE]] = True
_LEAN_IO_TAGS = np.zeros(256, dtype=bool)
_LEAN_IO_TAGS[[tags.IO_VALUES, tags.IO_SHAPES, tags.IO_TYPES]] = True
_BYTES_VAL = 31


def _high_bytes_of(w: np.ndarray) -> int:
    """How many bytes of the words ``w`` have their top bit set."""
    top = w & MSBS
    if bitwise_count is not None:
        return int(bitwise_count(top).sum())
    return sum(int(((top >> np.uint64(8 * k + 7)) & np.uint64(1)).sum()) for k in range(8))


def _lean_varints(w: np.ndarray, b: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Varints whose first byte is the low byte of ``w`` (and at ``q`` in ``b``; ``w`` holds at least their first
    two bytes): values, byte lengths, and how many of their bytes have the top bit set. One- and two-byte
    varints (nearly all) are read from ``w`` directly; only the longer ones from ``b`` (:func:`_wide_varints`)."""
    first = w & _FF
    if not first.size or int(first.max()) < 0x80:
        return first, np.ones(first.size, dtype=np.int64), 0
    second = (w >> _EIGHT) & _FF
    more = first >> _SEVEN  # 1 where a second byte follows
    both = first & second
    if int(both.max()) < 0x80:  # no varint of three bytes or more
        value = (first & np.uint64(0x7F)) | ((second * more) << _SEVEN)
        return value, more.view(np.int64) + 1, int(more.sum())
    value = (first & np.uint64(0x7F)) | (((second & np.uint64(0x7F)) * more) << _SEVEN)
    length = more.view(np.int64) + 1
    long = np.flatnonzero(both >= 0x80)
    value[long], length[long] = _wide_varints(b, q[long])
    return value, length, int(length.sum()) - length.size


def _wide_varints(b: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values and lengths of varints of three to ten bytes at ``q``: up to eight bytes from one word read,
    the ninth and tenth (negative int64 values) from two byte reads; :class:`WireFault` if longer."""
    value, length = word_varints(word_view(b)[q], 8)
    rest = np.flatnonzero(length == 0)  # nine or ten bytes: the word held 56 bits of the value
    if rest.size:
        at = q[rest]
        ninth, tenth = b[at + 8].astype(np.uint64), b[at + 9].astype(np.uint64)
        nine = ninth < 0x80
        if not (nine | (tenth < 0x80)).all():
            raise WireFault("varint longer than 10 bytes")
        value[rest] |= ((ninth & np.uint64(0x7F)) << np.uint64(56)) | np.where(nine, np.uint64(0), tenth << np.uint64(63))
        length[rest] = np.where(nine, 9, 10)
    return value, length


@record
class _Spans:
    """Length-delimited fields of one Node tag found by the walk, in walk order (a record's in wire order):
    one entry per step (``add``: ``step`` lists the steps), or all steps in one entry (``joined``, the C kernel's:
    ``steps_per`` then says how many of its fields each step of ``steps_at`` has)."""

    rows: list[np.ndarray] = _field_default(default_factory=list)
    offset: list[np.ndarray] = _field_default(default_factory=list)
    length: list[np.ndarray] = _field_default(default_factory=list)
    step: list[int] = _field_default(default_factory=list)
    steps_at: np.ndarray | None = None
    steps_per: np.ndarray | None = None

    def add(self, rows: np.ndarray, offset: np.ndarray, length: np.ndarray, step: int) -> None:
        self.rows.append(rows)
        self.offset.append(offset)
        self.length.append(length)
        self.step.append(step)

    @classmethod
    def joined(cls, rows: np.ndarray, offset: np.ndarray, length: np.ndarray, steps_at: np.ndarray,
               steps_per: np.ndarray) -> _Spans:
        spans = cls()
        if rows.size:
            spans.rows, spans.offset, spans.length = [rows], [offset], [length]
            spans.steps_at, spans.steps_per = steps_at, steps_per
        return spans

    def cat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not self.rows:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        if len(self.rows) == 1:
            return self.rows[0], self.offset[0], self.length[0]
        return np.concatenate(self.rows), np.concatenate(self.offset), np.concatenate(self.length)

    def steps(self) -> np.ndarray:
        if self.steps_at is not None and self.steps_per is not None:
            return np.repeat(self.steps_at, self.steps_per)
        return np.repeat(np.asarray(self.step, dtype=np.int64), [r.size for r in self.rows])

    def per_step(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The entries one step at a time (of a joined one too)."""
        if self.steps_at is None or self.steps_per is None:
            return list(zip(self.rows, self.offset, self.length))
        bounds = np.cumsum(self.steps_per)[:-1].tolist()
        return list(zip(*(np.split(column[0], bounds) for column in (self.rows, self.offset, self.length))))


#: The lean walk takes messages of at most this many fields (a bound the C kernel's step table needs).
_MAX_STEPS = 1 << 16
#: Node tag -> the C kernel's code (:func:`_kernel_parts`): 0-3 the scalar rows, 8 + k the length-delimited field
#: kind ``k`` of ``_KERNEL_NODE_KINDS``, 16 + k its single (varint) dependency kinds; -1 elsewhere.
_KERNEL_NODE_KINDS = (*_SPAN_TAGS, _TAG_CTRL_ONE, _TAG_DATA_ONE)
_KERNEL_NODE_CODES = np.full(256, -1, dtype=np.int8)
_KERNEL_NODE_CODES[list(_SCALAR_ROW)] = list(_SCALAR_ROW.values())
_KERNEL_NODE_CODES[list(_SPAN_TAGS)] = 8 + np.arange(len(_SPAN_TAGS))
_KERNEL_NODE_CODES[[_TAG_CTRL_ONE, _TAG_DATA_ONE]] = [16 + len(_SPAN_TAGS), 17 + len(_SPAN_TAGS)]
#: IOInfo tag -> the C kernel's code: its three string fields, one kind.
_KERNEL_IO_CODES = np.full(256, -1, dtype=np.int8)
_KERNEL_IO_CODES[[tags.IO_VALUES, tags.IO_SHAPES, tags.IO_TYPES]] = 8
_KERNEL_ERRORS = {1: _Unusual, 2: WireFault}


def _raise_kernel(status: int, what: str) -> None:
    if status:
        raise _KERNEL_ERRORS[status](what)


_LeanParts = tuple[np.ndarray, dict[int, "_Spans"], list[list[tuple[np.ndarray, ...]] | None], "_LeanAttrs | None",
                   np.ndarray, int]


def _lean_parts(b: np.ndarray, words: np.ndarray, rec_off: np.ndarray, rec_end: np.ndarray, texts: bool,
                hot: _Hot) -> _LeanParts:
    """The lean walk of the records, their IOInfo messages and their attributes: the scalars and spans
    (:func:`_lean_nodes`), each side's IOInfo strings (:func:`_lean_io`; None unless ``texts``), the attributes
    (:func:`_lean_attributes`; None without any), their names' ids in ``hot`` (:func:`_lean_hot_ids`) and the
    top-bit bytes of everything walked. Raises what the first of those walks to fail raises. The C kernel, where
    built, gives the same (:func:`_kernel_parts`)."""
    if _wire.KERNEL is not None:
        return _kernel_parts(b, rec_off, rec_end, texts, hot)
    scalars, spans, high = _lean_nodes(b, words, rec_off, rec_end)
    io_texts: list[list[tuple[np.ndarray, ...]] | None] = []
    for tag in (_TAG_INPUTS, _TAG_OUTPUTS):
        _, start, length = spans[tag].cat()
        side: list[tuple[np.ndarray, ...]] | None = [] if texts else None
        if start.size:
            high += _lean_io(b, words, start, start + length, side)
        io_texts.append(side)
    _, a_start, a_len = spans[_TAG_ATTR].cat()
    attrs = _lean_attributes(b, words, a_start, a_start + a_len) if a_start.size else None
    ids = _lean_hot_ids(words, a_start, attrs, hot) if attrs is not None else np.zeros(0, dtype=np.int64)
    return scalars, spans, io_texts, attrs, ids, high


def _kernel_parts(b: np.ndarray, rec_off: np.ndarray, rec_end: np.ndarray, texts: bool, hot: _Hot) -> _LeanParts:
    """:func:`_lean_parts` by the C kernel (``_walk.lean``): one pass over the records. The spans of a tag come as
    one joined entry (:meth:`_Spans.joined`), and so do each side's strings: the numpy walk's entries joined."""
    nodes, inputs, outputs, attr = _wire.KERNEL.lean(b, int64s(rec_off), int64s(rec_end), _KERNEL_NODE_CODES,
                                                _KERNEL_IO_CODES, _VALUE_TAGS, tags.ATTR_NAME,
                                                (_KERNEL_NODE_KINDS.index(_TAG_INPUTS),
                                                 _KERNEL_NODE_KINDS.index(_TAG_OUTPUTS)),
                                                _KERNEL_NODE_KINDS.index(_TAG_ATTR), texts,
                                                (hot.slot_w0, hot.slot_w1, hot.slot_id, int(hot.slot_mult),
                                                 int(hot.slot_shift)))
    status, high, scal, counts, rows, off, length = nodes
    _raise_kernel(status, "a Node field the lean walk does not take")
    kinds = len(_KERNEL_NODE_KINDS)
    counts = np.frombuffer(counts, dtype=np.int64).reshape(-1, kinds)
    rows, off, length = (np.frombuffer(x, dtype=np.int64) for x in (rows, off, length))
    spans = {}
    at = 0
    for k, tag in enumerate(_KERNEL_NODE_KINDS):
        column = counts[:, k]
        steps_at = np.flatnonzero(column)
        size = int(column.sum())
        spans[tag] = _Spans.joined(rows[at:at + size], off[at:at + size], length[at:at + size], steps_at,
                                   column[steps_at])
        at += size
    io_texts: list[list[tuple[np.ndarray, ...]] | None] = []
    for side in (inputs, outputs):
        side_status, side_high, msg, tag, t_off, t_len = side
        _raise_kernel(side_status, "an IOInfo field the lean walk does not take")
        high += side_high
        found = [tuple(np.frombuffer(x, dtype=np.int64) for x in (msg, tag, t_off, t_len))] if len(msg) else []
        io_texts.append(found if texts else None)
    a_status, a_high, head, name_len, kind, value, v_off, ids = attr
    attrs = None
    if len(head):
        _raise_kernel(a_status, "an attribute the lean walk does not take")
        attrs = _LeanAttrs(np.frombuffer(head, dtype=np.uint64), np.frombuffer(name_len, dtype=np.int64),
                           np.frombuffer(kind, dtype=np.int64), np.frombuffer(value, dtype=np.uint64),
                           np.frombuffer(v_off, dtype=np.int64), a_high)
    return (np.frombuffer(scal, dtype=np.uint64).reshape(len(_SCALAR_ROW), rec_off.size), spans, io_texts, attrs,
            np.frombuffer(ids, dtype=np.int64), high)


def _lean_nodes(b: np.ndarray, words: np.ndarray, rec_off: np.ndarray, rec_end: np.ndarray
                ) -> tuple[np.ndarray, dict[int, _Spans], int]:
    """Walk the Node records' top-level fields in lock-step: the scalar columns (id, type, start,
    duration; last wins), the spans of every length-delimited (and single dep) field per tag, and the
    top-bit bytes of the tags and varints walked. Records of more than ``_MAX_STEPS`` fields are
    :class:`_Unusual`."""
    n = rec_off.size
    scalars = np.zeros((len(_SCALAR_ROW), n), dtype=np.uint64)
    rows_of = [scalars[k] for k in range(len(_SCALAR_ROW))]
    spans = {tag: _Spans() for tag in (*_SPAN_TAGS, _TAG_CTRL_ONE, _TAG_DATA_ONE)}
    act = np.flatnonzero(rec_off < rec_end)  # empty records (validation keeps them) have no fields
    p = rec_off[act].astype(np.int64)
    e = rec_end[act].astype(np.int64)
    high = 0
    step = 0
    while act.size:
        if step >= _MAX_STEPS:
            raise _Unusual("a record of more fields than the lean walk takes")
        w = words[p]
        tag = (w & _FF).view(np.int64)
        counts = np.bincount(tag, minlength=256)
        present = np.flatnonzero(counts)
        if not _LEAN_NODE_TAGS[present].all():
            raise _Unusual("a Node field the lean walk does not take")
        if present.size == 1:
            groups: list[tuple[int, np.ndarray | None]] = [(int(present[0]), None)]
        else:  # the step's fields grouped by tag (a radix sort of one byte)
            order = np.argsort(tag.astype(np.uint8), kind="stable")
            ends = np.cumsum(counts[present]).tolist()
            groups = [(t, order[lo:hi]) for t, lo, hi in zip(present.tolist(), [0, *ends[:-1]], ends)]
            new_p = np.empty_like(p)
        for t, sub in groups:
            ws, ps, rows = (w, p, act) if sub is None else (w[sub], p[sub], act[sub])
            value, vlen, extra = _lean_varints(ws >> _EIGHT, b, ps + 1)
            high += extra
            row = _SCALAR_ROW.get(t)
            if row is not None:
                rows_of[row][rows] = value
                after = ps + 1 + vlen
            elif t == _TAG_CTRL_ONE or t == _TAG_DATA_ONE:
                spans[t].add(rows, value.view(np.int64), vlen, step)  # the value itself as the "offset"
                after = ps + 1 + vlen
            else:
                if int(value.max()) > _LENGTH_LIMIT:
                    raise WireFault("implausible length")
                offset = ps + 1 + vlen
                length = value.view(np.int64)
                spans[t].add(rows, offset, length, step)
                after = offset + length
            if sub is None:
                new_p = after
            else:
                new_p[sub] = after
        if (new_p > e).any():
            raise WireFault("field runs past its message")
        going = new_p < e
        if going.all():
            p = new_p
        else:
            act, p, e = act[going], new_p[going], e[going]
        step += 1
    return scalars, spans, high


def _lean_io(b: np.ndarray, words: np.ndarray, start: np.ndarray, end: np.ndarray,
             texts: list[tuple[np.ndarray, ...]] | None = None) -> int:
    """Walk IOInfo messages (string fields 1-3 only); the top-bit bytes of their tags and lengths.
    ``texts`` receives each step's (message index, tag, string offset, length) when given."""
    high = 0
    going = start < end
    p, e = start[going], end[going]
    msg = np.flatnonzero(going)  # each message's index (kept in step with p only when texts are kept)
    step = 0
    while p.size:
        if step >= _MAX_STEPS:
            raise _Unusual("an IOInfo of more fields than the lean walk takes")
        step += 1
        w = words[p]
        tag = (w & _FF).view(np.int64)
        if not _LEAN_IO_TAGS[tag].all():
            raise _Unusual("an IOInfo field the lean walk does not take")
        length, vlen, extra = _lean_varints(w >> _EIGHT, b, p + 1)
        high += extra
        if int(length.max()) > _LENGTH_LIMIT:
            raise WireFault("implausible length")
        if texts is not None:
            texts.append((msg, tag, p + 1 + vlen, length.view(np.int64)))
        p = p + 1 + vlen + length.view(np.int64)
        if (p > e).any():
            raise WireFault("field runs past its message")
        going = p < e
        if not going.all():
            p, e = p[going], e[going]
            if texts is not None:
                msg = msg[going]
    return high


@record
class _LeanAttrs:
    head: np.ndarray  # the attribute's first eight bytes (tag 0a, name length, the name's first six bytes)
    name_len: np.ndarray
    kind: np.ndarray  # oneof member of the value (0: a name alone)
    value: np.ndarray  # varint value, fixed bits, or string length
    v_off: np.ndarray  # where a string value starts
    high: int  # top-bit bytes of the tags, lengths and values


def _value_tags() -> np.ndarray:
    """``table[u]`` for the first two bytes ``u`` (little-endian) of an attribute's value field: its oneof member
    ``k`` and wire type as ``k | wire << 6`` where the field is a scalar or string member with the wire type
    protobuf parses it from (a one- or two-byte tag; not ``bytes_val``), else -1 (the lean walk does not take it).

    Made from the code of each of the 16,384 tags a one- or two-byte varint holds (a tenth of the start-up cost of
    computing all 65,536 entries one by one): a first byte below 0x80 is the whole tag (whatever follows it); a
    first byte ``0x80 | low`` and a second byte below 0x80 make tag ``low | second << 7`` (oneof members 16..33
    have two-byte tags); a second byte of 0x80 or more makes a longer tag, which is none of the members."""
    tag = np.arange(1 << 14, dtype=np.int64)
    kind = np.minimum(tag >> 3, 33)
    wire = tag & 7
    scalar = ((kind & 1) == 1) & (kind >= 3) & (ONEOF_WIRE_LUT[kind] == wire) & (kind != _BYTES_VAL)
    code = np.where(scalar, kind | (wire << 6), -1).astype(np.int16)
    table = np.full((0x100, 0x100), -1, dtype=np.int16)  # [second byte, first byte]
    table[:, :0x80] = code[:0x80]
    table[:0x80, 0x80:] = code.reshape(0x80, 0x80)
    return table.ravel()


_VALUE_TAGS = _value_tags()
_LOW16, _TOP7 = np.uint64(0xFFFF), np.uint64(0x80)


def _lean_attributes(b: np.ndarray, words: np.ndarray, a_start: np.ndarray, a_end: np.ndarray) -> _LeanAttrs:
    """Decode attributes that are exactly a name (one-byte length) and at most one scalar or string value,
    in one pass; :class:`_Unusual` if any is not."""
    head = words[a_start]
    name_len = ((head >> _EIGHT) & _FF).view(np.int64)
    q = a_start + 2 + name_len  # the value's tag
    if not ((head & _FF) == tags.ATTR_NAME).all() or int(name_len.max()) >= 0x80 or (q > a_end).any():
        raise _Unusual("an attribute that is not a short name and a value")
    w = words[q]
    code = _VALUE_TAGS[(w & _LOW16).view(np.int64)]  # the value's tag (its first two bytes): oneof member and wire
    alone = q == a_end  # a name alone
    if not ((code >= 0) | alone).all():
        raise _Unusual("an attribute with a list, doc string or bytes value, or another field")
    # oneof members 16..33 have two-byte tags (after a name alone, ``w`` holds what follows the attribute: no tag
    # of its own, so none of its bytes are counted; they were, and a cut-short count let a bad string be "proven")
    two = ((w & _TOP7) != 0) & ~alone
    kind = (code & 63).astype(np.int64)
    kind[alone] = 0
    wire = (code >> 6).astype(np.int64)
    high = int(np.count_nonzero(two))
    off = q + 1 + two
    rest = w >> (_EIGHT + (two.view(np.uint8).astype(np.uint64) << np.uint64(3)))
    # (a name alone has no value: what its ``w`` holds is the next field's, whatever its tag reads as)
    fixed_width = ~alone & ((wire == 1) | (wire == 5))
    varint = ~alone & ~fixed_width
    if varint.all():
        value, vlen, extra = _lean_varints(rest, b, off)
    else:
        value = np.zeros(a_start.size, dtype=np.uint64)
        vlen = np.zeros(a_start.size, dtype=np.int64)
        some = np.flatnonzero(varint)
        value[some], vlen[some], extra = _lean_varints(rest[some], b, off[some])
        for wire_type, width in ((1, 8), (5, 4)):
            some = np.flatnonzero(fixed_width & (wire == wire_type))
            if some.size:
                value[some], vlen[some] = fixed(b, off[some], width), width
                extra += _high_bytes_of(words[off[some]] & LOW_BYTES[width])
    high += extra
    v_off = off + vlen
    end = np.where(alone, q, v_off + np.where(wire == 2, value.view(np.int64), 0))
    if not (end == a_end).all():
        raise _Unusual("an attribute with more than a name and a value")
    return _LeanAttrs(head, name_len, kind, value, v_off, high)


#: Per name length (below 0x80, as the lean walk requires): the masks of an attribute's first and second words that
#: keep its tag, length and name bytes.
_NAME_MASK0 = LOW_BYTES[np.minimum(np.arange(0x80) + 2, 8)]
_NAME_MASK1 = LOW_BYTES[np.clip(np.arange(0x80) - 6, 0, 8)]


def _lean_hot_ids(words: np.ndarray, a_start: np.ndarray, attrs: _LeanAttrs, hot: _Hot) -> np.ndarray:
    """Id (:class:`_Hot`) of each attribute's name (-1: not one that ``hot`` decodes): its first word (masked to
    the name) picks a slot of ``hot``'s table by a multiplicative hash, and the slot's name must be it, first and
    second word alike."""
    name_len = attrs.name_len
    w0 = attrs.head & _NAME_MASK0[name_len]
    with np.errstate(over="ignore"):
        slot = (w0 * hot.slot_mult) >> hot.slot_shift
    hit = np.flatnonzero(hot.slot_w0[slot] == w0)  # the length byte matched too: a name of at most 14 bytes
    ids = np.full(a_start.size, -1, dtype=np.int64)
    if hit.size:
        slot = slot[hit]
        w1 = words[a_start[hit] + 8] & _NAME_MASK1[name_len[hit]]
        good = w1 == hot.slot_w1[slot]
        ids[hit[good]] = hot.slot_id[slot[good]]
    return ids


def _lean_deps(b: np.ndarray, packed: _Spans, single: _Spans, n: int) -> tuple[np.ndarray, np.ndarray, int]:
    """CSR (ptr, values) of one dep list kind from its packed lists and single entries (wire order), and
    the top-bit bytes of the packed lists."""
    rows, off, length = packed.cat()
    high = 0
    if not single.rows and (rows.size < 2 or int(np.bincount(rows, minlength=n).max()) <= 1):
        # at most one packed list per node (the norm): the lists in row order without a sort
        at, size = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        at[rows], size[rows] = off, length
        rows = np.flatnonzero(size)
        counts = np.zeros(n, dtype=np.int64)
        if rows.size:
            values, counts[rows] = packed_varints(b, at[rows], size[rows])
            high = int(size.sum()) - values.size
        else:
            values = np.zeros(0, dtype=np.uint64)
    else:
        steps = packed.steps()
        keep = length > 0
        rows, off, length, steps = rows[keep], off[keep], length[keep], steps[keep]
        if rows.size:
            values, per = packed_varints(b, off, length)
            high = int(length.sum()) - values.size
            rows, steps = np.repeat(rows, per), np.repeat(steps, per)
        else:
            values = np.zeros(0, dtype=np.uint64)
        one_rows, one_values, _ = single.cat()
        rows = np.concatenate([rows, one_rows])
        values = np.concatenate([values, one_values.view(np.uint64)])
        values = values[np.lexsort((np.concatenate([steps, single.steps()]), rows))]  # by row, then wire order
        counts = np.bincount(rows, minlength=n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, values, high


def _checked_deps(b: np.ndarray, packed: _Spans, single: _Spans, n: int) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`_lean_deps` without the values (empty lists), for callers that read no dependencies: the packed
    lists are checked as their decoding checks them (each ends with a varint's last byte, no varint longer than
    ten bytes) and their top-bit bytes counted; lists of up to eight bytes from one word each."""
    _, off, length = packed.cat()
    keep = length > 0
    off, length = off[keep], length[keep]
    high = 0
    if off.size and _wire.KERNEL is not None:
        status, high = _wire.KERNEL.checked(b, int64s(off), int64s(length))
        raise_packed_fault(status)
    elif off.size:
        if int(b[off + length - 1].max()) >= 0x80:
            raise WireFault("packed varint crosses its list")
        short = length <= 8
        if short.all():
            high = _high_bytes_of(word_view(b)[off] & LOW_BYTES[length])
        else:
            high = _high_bytes_of(word_view(b)[off[short]] & LOW_BYTES[length[short]])
            values, _ = packed_varints(b, off[~short], length[~short])  # (raises what decoding raises)
            high += int(length[~short].sum()) - values.size
    return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.uint64), high


def _record_high_bytes(b: np.ndarray, words: np.ndarray, rec_off: np.ndarray, rec_end: np.ndarray) -> int:
    """Bytes with the top bit set inside the records (what lies between them, frame headers, not counted)."""
    if _wire.KERNEL is not None:
        total = _wire.KERNEL.high_bytes(b, int64s(rec_off), int64s(rec_end))
        if total == -1:
            raise _Unusual("records out of order")
        if total < 0:
            raise WireFault("a record outside the buffer")
        return int(total)
    gap_at = rec_end[:-1]
    gap = rec_off[1:] - gap_at
    if (gap < 0).any():
        raise _Unusual("records out of order")
    total = int(np.count_nonzero(b[int(rec_off[0]):int(rec_end[-1])] >= 0x80))
    if gap.any():
        small = gap <= 8
        total -= _high_bytes_of(words[gap_at[small]] & LOW_BYTES[gap[small]])
        for at, size in zip(gap_at[~small].tolist(), gap[~small].tolist()):  # few: the files of a batch
            total -= int(np.count_nonzero(b[at:at + size] >= 0x80))
    return total


def _lean_chunk(buf: bytes, b: np.ndarray, rec_off: np.ndarray, rec_end: np.ndarray, int_rows: np.ndarray,
                names: bool = True, keep: list[WalkSpans | None] | None = None, hot: _Hot | None = None
                ) -> tuple[Columns, bool]:
    """:func:`_decode_chunk` by the lean walk; :class:`_Unusual` (before anything is written to
    ``int_rows``) when the records are not of its shape. ``keep``: the chunk's :class:`WalkSpans` is appended."""
    n = rec_off.size
    hot = hot or _hot(None)
    if keep is None and _wire.KERNEL is not None:
        return _kernel_chunk(buf, b, rec_off, rec_end, int_rows, names, hot)
    words = word_view(b)
    scalars, spans, io_texts, attrs, name_ids, high = _lean_parts(b, words, rec_off, rec_end, keep is not None, hot)
    io_spans = [spans[tag].cat() for tag in (_TAG_INPUTS, _TAG_OUTPUTS)]
    owner, a_start, a_len = spans[_TAG_ATTR].cat()
    dep_lists = _lean_deps if hot.deps else _checked_deps
    ctrl_ptr, ctrl_deps, ctrl_high = dep_lists(b, spans[_TAG_CTRL], spans[_TAG_CTRL_ONE], n)
    data_ptr, data_deps, data_high = dep_lists(b, spans[_TAG_DATA], spans[_TAG_DATA_ONE], n)
    high += ctrl_high + data_high
    record_high = _record_high_bytes(b, words, rec_off, rec_end) if n else 0
    ids, raw_type, start, duration = scalars
    types = (raw_type & _U32).astype(np.uint32).view(np.int32)
    if names:
        name_off, name_len = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        for rows, off, length in spans[_TAG_NAME].per_step():
            name_off[rows], name_len[rows] = off, length  # a later name wins
        name_idx, strings = _string_table(buf, b, name_off, name_len)
    else:
        name_idx, strings = np.full(n, -1, dtype=np.int32), []
    if attrs is not None:
        high += attrs.high
        cpu, pg, pg_strings = _hot_columns(buf, b, owner, name_ids, attrs.kind,
                                           attrs.value, attrs.v_off, int_rows, hot)
        if pg_strings:
            pg = _remapped(pg, _merged(strings, pg_strings))
    else:
        cpu, pg = np.full(n, -1, dtype=np.int8), np.full(n, -1, dtype=np.int32)
    proven = record_high == high
    columns = Columns(ids, types, name_idx, strings, start, duration, data_ptr, data_deps, ctrl_ptr, ctrl_deps,
                      cpu, pg, dict(zip(hot.ints, int_rows)))
    if keep is not None:
        keep.append(WalkSpans(io_spans, [_joined_texts(side or []) for side in io_texts], owner, a_start, a_len,
                              spans[_TAG_ATTR].steps(), attrs))
    return columns, proven


#: How the C kernel reads the integer value of each oneof member (``_walk.columns``' int_codes; -1: not an integer),
#: from the decoders :func:`~etkit.format.attrwire.int_values` applies.
_INT_CODES = np.full(64, -1, dtype=np.int8)
for _number, (_, _decoder) in VALUE_FIELDS.items():
    _INT_CODES[_number] = ("int64", "int32", "uint32", "uint64", "sint32", "sint64", "bool").index(_decoder)
#: The kinds of ``_walk.columns``: name, ctrl and data lists, inputs, outputs, attributes, single ctrl and data deps.
_KERNEL_COLUMN_KINDS = tuple(_KERNEL_NODE_KINDS.index(tag) for tag in (
    _TAG_NAME, _TAG_CTRL, _TAG_DATA, _TAG_INPUTS, _TAG_OUTPUTS, _TAG_ATTR, _TAG_CTRL_ONE, _TAG_DATA_ONE))


def _kernel_chunk(buf: bytes, b: np.ndarray, rec_off: np.ndarray, rec_end: np.ndarray, int_rows: np.ndarray,
                  names: bool, hot: _Hot) -> tuple[Columns, bool]:
    """:func:`_lean_chunk` without spans to keep, by the C kernel's ``columns``: one pass over the records that walks
    and checks them as :func:`_lean_parts` does and builds the columns that :func:`_lean_chunk` builds from its
    results (the same columns, the same verdict); the ``pg_name`` strings are then tabled here as there."""
    n = rec_off.size
    status, proven, scal, name_off, name_len, ctrl_ptr, ctrl_deps, data_ptr, data_deps, cpu, pg_found = \
        _wire.KERNEL.columns(b, int64s(rec_off), int64s(rec_end), _KERNEL_NODE_CODES, _KERNEL_IO_CODES, _VALUE_TAGS,
                             tags.ATTR_NAME, _KERNEL_COLUMN_KINDS, names, hot.deps,
                             (hot.slot_w0, hot.slot_w1, hot.slot_id, int(hot.slot_mult), int(hot.slot_shift)),
                             int_rows, _INT_CODES, hot.cpu, hot.pg)
    _raise_kernel(status, "records the lean walk does not take")
    ids, raw_type, start, duration = np.frombuffer(scal, dtype=np.uint64).reshape(len(_SCALAR_ROW), n)
    types = (raw_type & _U32).astype(np.uint32).view(np.int32)
    if names:
        name_idx, strings = _string_table(buf, b, np.frombuffer(name_off, dtype=np.int64),
                                          np.frombuffer(name_len, dtype=np.int64))
    else:
        name_idx, strings = np.full(n, -1, dtype=np.int32), []
    pg = np.full(n, -1, dtype=np.int32)
    row, step, kind, value, v_off = (np.frombuffer(x, dtype=np.uint64 if k == 3 else np.int64)
                                     for k, x in enumerate(pg_found))
    if row.size:  # in walk order (by step, then record), as _hot_columns meets them
        order = np.argsort(step, kind="stable")
        row, kind, value, v_off = row[order], kind[order], value[order], v_off[order]
        pg_strings = _pg_column(buf, b, np.arange(row.size), row, kind, value, v_off, INT_KIND[kind], pg)
        if pg_strings:
            pg = _remapped(pg, _merged(strings, pg_strings))
    columns = Columns(ids, types, name_idx, strings, start, duration, np.frombuffer(data_ptr, dtype=np.int64),
                      np.frombuffer(data_deps, dtype=np.uint64), np.frombuffer(ctrl_ptr, dtype=np.int64),
                      np.frombuffer(ctrl_deps, dtype=np.uint64), np.frombuffer(cpu, dtype=np.int8), pg,
                      dict(zip(hot.ints, int_rows)))
    return columns, bool(proven)


def _joined_texts(steps: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    if not steps:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    return tuple(np.concatenate(column) for column in zip(*steps))


def _merged(strings: list[str], extra: list[str]) -> np.ndarray:
    """Append to ``strings`` (distinct) those of ``extra`` it lacks; where each of ``extra`` is in it then.
    A few extra strings (process group names) are looked up by a scan, many through a table."""
    if len(extra) > 64:
        index = {s: i for i, s in enumerate(strings)}
        remap = [index.setdefault(s, len(index)) for s in extra]
        strings[len(strings):] = list(index)[len(strings):]
        return np.asarray(remap, dtype=np.int32)
    remap = []
    for s in extra:
        try:
            remap.append(strings.index(s))
        except ValueError:
            remap.append(len(strings))
            strings.append(s)
    return np.asarray(remap, dtype=np.int32)


def _remapped(idx: np.ndarray, remap: np.ndarray) -> np.ndarray:
    """String indices ``idx`` mapped through ``remap``; -1 (absent, or a name not decoded) stays -1."""
    return np.where(idx >= 0, remap[np.maximum(idx, 0)], -1).astype(np.int32)


def join_columns(parts: list[Columns], ints: dict[str, np.ndarray] | None = None) -> Columns:
    """One :class:`Columns` of consecutive chunks: string indices remapped into one first-seen table,
    CSR offsets shifted. The integer attribute columns are ``ints`` when the caller has them whole
    already, else the chunks' joined. Each column of the chunks is released from them as soon as it is
    joined, so a join needs about one column's worth of extra memory, not a second copy of everything."""
    if len(parts) == 1 and ints is None:
        return parts[0]
    index: dict[str, int] = {}
    remaps = [np.asarray([index.setdefault(s, len(index)) for s in p.strings] or [0], dtype=np.int32) for p in parts]

    def take(column: str) -> list[np.ndarray]:
        out = [getattr(p, column) for p in parts]
        for p in parts:
            setattr(p, column, None)
        return out

    def cat(column: str) -> np.ndarray:
        return np.concatenate(take(column))

    identity = [bool((remap == np.arange(remap.size)).all()) for remap in remaps]  # (the first part's, at least)

    def strings(column: str) -> np.ndarray:
        return np.concatenate([idx if same and idx.dtype == np.int32 else _remapped(idx, remap)
                               for idx, remap, same in zip(take(column), remaps, identity)])

    def csr(ptr_column: str) -> np.ndarray:
        ptrs = take(ptr_column)
        shift = np.cumsum([0] + [int(p[-1]) for p in ptrs[:-1]])
        return np.concatenate([ptrs[0][:1]] + [p[1:] + s for p, s in zip(ptrs, shift.tolist())])

    if ints is None:
        ints = {k: np.concatenate([p.ints.pop(k) for p in parts]) for k in list(parts[0].ints)}
    return Columns(cat("ids"), cat("types"), strings("name_idx"), list(index), cat("start"), cat("duration"),
                   csr("data_ptr"), cat("data_deps"), csr("ctrl_ptr"), cat("ctrl_deps"), cat("is_cpu_op"),
                   strings("pg_idx"), ints)


def split_columns(cols: Columns, bounds: np.ndarray) -> list[Columns]:
    """The rows ``bounds[i]:bounds[i + 1]`` of ``cols`` as their own :class:`Columns` (what
    :func:`decode_columns` of those records alone gives: CSR offsets from 0, a string table of their
    own, in first use: names, then ``pg_name`` values). Columns are views of ``cols``' where they can be."""
    table = np.asarray(cols.strings + [""], dtype=object)
    edges = bounds.tolist()
    out = []
    for r0, r1 in zip(edges[:-1], edges[1:]):
        name, pg = cols.name_idx[r0:r1], cols.pg_idx[r0:r1]
        used = np.concatenate([name[name >= 0], pg[pg >= 0]])
        if used.size:
            distinct, first = np.unique(used, return_index=True)
            order = np.argsort(first, kind="stable")
            local = np.empty(distinct.size, dtype=np.int32)
            local[order] = np.arange(distinct.size, dtype=np.int32)
            strings = table[distinct[order]].tolist()
            name, pg = (np.where(idx >= 0, local[np.searchsorted(distinct, idx)], -1).astype(np.int32) for idx in (name, pg))
        else:
            strings = []
        d0, d1, c0, c1 = (int(x) for x in (cols.data_ptr[r0], cols.data_ptr[r1], cols.ctrl_ptr[r0], cols.ctrl_ptr[r1]))
        out.append(Columns(cols.ids[r0:r1], cols.types[r0:r1], name, strings, cols.start[r0:r1], cols.duration[r0:r1],
                           cols.data_ptr[r0:r1 + 1] - d0, cols.data_deps[d0:d1], cols.ctrl_ptr[r0:r1 + 1] - c0,
                           cols.ctrl_deps[c0:c1], cols.is_cpu_op[r0:r1], pg,
                           {k: v[r0:r1] for k, v in cols.ints.items()}))
    return out
