"""Perfetto's native protobuf trace format (TrackEvent), for timelines too big for JSON.

A trace is a stream of ``Trace.packet`` records (field 1), each a ``TracePacket`` holding either a
``TrackDescriptor`` (a process per rank, a thread per track) or one ``TrackEvent`` (slice begin/end)
with its timestamp in ns. Flow arrows ride on the begin events (``flow_ids`` at the source,
``terminating_flow_ids`` at the target). Field numbers are Perfetto's stable public ones
(protos/perfetto/trace/...). The encoder here writes the few fields needed, by hand: it needs no
generated code and streams, so memory stays flat however large the job.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from ..format.stream import encode_varint

__all__ = ["PacketWriter"]

# TracePacket
_TIMESTAMP, _SEQUENCE_ID, _TRACK_EVENT, _SEQUENCE_FLAGS, _TRACK_DESCRIPTOR = 8, 10, 11, 13, 60
# TrackDescriptor / ProcessDescriptor / ThreadDescriptor
_UUID, _NAME, _PROCESS, _THREAD, _PARENT = 1, 2, 3, 4, 5
_PID, _PROCESS_NAME, _TID, _THREAD_NAME = 1, 6, 2, 5
# TrackEvent
_CATEGORIES, _DEBUG, _TYPE, _TRACK_UUID, _EVENT_NAME, _FLOW_IDS, _TERMINATING = 22, 4, 9, 11, 23, 47, 48
_SLICE_BEGIN, _SLICE_END = 1, 2
# DebugAnnotation
_ANN_NAME, _ANN_INT, _ANN_STRING = 10, 4, 6
_SEQ_INCREMENTAL_STATE_CLEARED = 1


def _key(field: int, wire: int) -> bytes:
    return encode_varint((field << 3) | wire)


def _varint(field: int, value: int) -> bytes:
    return _key(field, 0) + encode_varint(value & 0xFFFFFFFFFFFFFFFF)


def _bytes(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + encode_varint(len(payload)) + payload


def _text(field: int, text: str) -> bytes:
    return _bytes(field, text.encode("utf-8", "replace"))


def _fixed64(field: int, value: int) -> bytes:
    return _key(field, 1) + struct.pack("<Q", value)


class PacketWriter:
    """Builds the packets of one trace; ``out`` is any binary stream. Set ``sequence`` (a packet
    sequence, e.g. one per rank) before writing; keep timestamps non-decreasing within one."""

    def __init__(self, out) -> None:  # type: ignore[no-untyped-def]
        self.out = out
        self.sequence = 1
        self._started: set[int] = set()

    def _packet(self, body: bytes) -> None:
        head = _varint(_SEQUENCE_ID, self.sequence)
        if self.sequence not in self._started:  # nothing interned, but readers expect a clean start
            head += _varint(_SEQUENCE_FLAGS, _SEQ_INCREMENTAL_STATE_CLEARED)
            self._started.add(self.sequence)
        self.out.write(_bytes(1, head + body))

    def process(self, uuid: int, pid: int, name: str) -> None:
        desc = _varint(_UUID, uuid) + _bytes(_PROCESS, _varint(_PID, pid) + _text(_PROCESS_NAME, name))
        self._packet(_bytes(_TRACK_DESCRIPTOR, desc))

    def thread(self, uuid: int, parent: int, pid: int, tid: int, name: str) -> None:
        thread = _varint(_PID, pid) + _varint(_TID, tid) + _text(_THREAD_NAME, name)
        desc = _varint(_UUID, uuid) + _varint(_PARENT, parent) + _text(_NAME, name) + _bytes(_THREAD, thread)
        self._packet(_bytes(_TRACK_DESCRIPTOR, desc))

    def begin(self, ts: int, track: int, name: str, category: str, args: dict[str, int | str],
              flows_out: Iterable[int] = (), flows_in: Iterable[int] = ()) -> None:
        event = _varint(_TYPE, _SLICE_BEGIN) + _varint(_TRACK_UUID, track) + _text(_EVENT_NAME, name)
        event += _text(_CATEGORIES, category)
        for key, value in args.items():
            val = _varint(_ANN_INT, value) if isinstance(value, int) else _text(_ANN_STRING, str(value))
            event += _bytes(_DEBUG, _text(_ANN_NAME, key) + val)
        event += b"".join(_fixed64(_FLOW_IDS, f) for f in flows_out)
        event += b"".join(_fixed64(_TERMINATING, f) for f in flows_in)
        self._packet(_varint(_TIMESTAMP, ts) + _bytes(_TRACK_EVENT, event))

    def end(self, ts: int, track: int) -> None:
        event = _varint(_TYPE, _SLICE_END) + _varint(_TRACK_UUID, track)
        self._packet(_varint(_TIMESTAMP, ts) + _bytes(_TRACK_EVENT, event))
