"""The JSON twin of an ``.et`` file: one JSON document that converts back to the exact same bytes.

Layout (one node per line, so both directions stream)::

    {"format":"etkit-et-json","version":1,"metadata":{...},"nodes":[
    {...node...},
    {...node...}
    ]}

Messages use the proto3 JSON mapping (lowerCamelCase names, enum names, 64-bit integers as strings so
they survive any JSON parser, bytes as base64), the same mapping as the reference jsonizer. A node
whose bytes protobuf would not reproduce from its fields (unknown fields, non-canonical encoding)
carries them in ``"_raw"`` (base64), so the round trip is exact for every input.

Reading accepts this layout, any other formatting of the same document, and the reference jsonizer's
concatenated objects (GlobalMetadata first, then one object per node).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from google.protobuf.message import DecodeError

from ..errors import TraceFormatError
from ..fileio import atomic_output, open_maybe_gzip
from .jsonfast import FramingFault, JsonWriter, record_chunks
from .jsonizer import split_objects
from .protojson import (
    KIND_JSON,
    NODE_TYPE_NAMES,
    WIDE_SCALARS,
    NodeEncoder,
    attr_to_dict,
    compact,
    dict_to_metadata,
    dict_to_node,
    io_to_dict,
    metadata_to_dict,
    node_to_dict,
    raw_bytes,
)
from .schema import AttributeProto, GlobalMetadata, IOInfo, Node
from .stream import TraceWriter, open_trace

__all__ = ["to_json", "from_json", "iter_json_trace", "node_to_dict", "dict_to_node", "FORMAT_NAME"]

FORMAT_NAME = "etkit-et-json"


class _Fragments:
    """JSON text of repeated pieces, by their protobuf bytes: traces repeat the same attributes, IOInfo
    and names on most nodes, so each distinct one is converted once (bounded: cleared when full)."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit
        self.table: dict[object, bytes] = {}

    def _get(self, key: object, make: Any) -> bytes:
        hit = self.table.get(key)
        if hit is None:
            if len(self.table) >= self.limit:
                self.table.clear()
            hit = self.table[key] = compact(orjson.dumps(make()))
        return hit

    def attr(self, attr: AttributeProto) -> bytes:
        key = attr.SerializeToString()
        hit = self.table.get(key)
        if hit is not None:
            return hit
        kind = attr.WhichOneof("value")
        quoted = _QUOTED_SCALARS.get(kind)
        if quoted is None or attr.doc_string or not attr.name:
            return self._get(key, lambda: attr_to_dict(attr))
        # integer-valued attributes are often unique per node (rf_id, seq_id): format them directly
        return bytes(b'{"name":' + self.name(attr.name) + quoted % getattr(attr, kind))

    def io(self, io: IOInfo) -> bytes:
        return self._get((io.values, io.shapes, io.types), lambda: io_to_dict(io))

    def name(self, name: str) -> bytes:
        return self._get(name, lambda: name)


#: ``%``-templates of integer attribute values after the name (64-bit ones quoted, as proto3 JSON says).
_QUOTED_SCALARS = {f"{k}_val": (f',"{KIND_JSON[k + "_val"]}":"%d"}}' if k in WIDE_SCALARS else f',"{KIND_JSON[k + "_val"]}":%d}}').encode()
                   for k in ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32",
                             "sfixed64")}

_TYPE_JSON = {value: b'"type":"' + name.encode() + b'"' for value, name in NODE_TYPE_NAMES.items()}


def _id_list(key: bytes, values: Any) -> bytes:
    return key + b'["' + b'","'.join([b"%d" % v for v in values]) + b'"]'


def node_json(node: Node, fragments: _Fragments) -> bytes:
    """The JSON text of :func:`node_to_dict` (the same document), built from cached fragments."""
    parts = []
    if node.id:
        parts.append(b'"id":"%d"' % node.id)
    if node.name:
        parts.append(b'"name":' + fragments.name(node.name))
    if node.type:
        parts.append(_TYPE_JSON.get(node.type) or b'"type":%d' % node.type)
    if node.ctrl_deps:
        parts.append(_id_list(b'"ctrlDeps":', node.ctrl_deps))
    if node.data_deps:
        parts.append(_id_list(b'"dataDeps":', node.data_deps))
    if node.start_time_micros:
        parts.append(b'"startTimeMicros":"%d"' % node.start_time_micros)
    if node.duration_micros:
        parts.append(b'"durationMicros":"%d"' % node.duration_micros)
    if node.HasField("inputs"):
        parts.append(b'"inputs":' + fragments.io(node.inputs))
    if node.HasField("outputs"):
        parts.append(b'"outputs":' + fragments.io(node.outputs))
    if node.attr:
        parts.append(b'"attr":[' + b",".join([fragments.attr(a) for a in node.attr]) + b"]")
    return b"{" + b",".join(parts) + b"}"


# -- files -------------------------------------------------------------------------------------------

def _with_raw(d: dict[str, Any], message: Any, payload: bytes) -> dict[str, Any]:
    """``d`` plus the original bytes when the JSON fields alone would not reproduce them."""
    if _needs_raw(message, payload) or _nan_lossy(orjson.dumps(d), dict_to_metadata, payload):
        d["_raw"] = base64.b64encode(payload).decode("ascii")
    return d


def _needs_raw(message: Any, payload: bytes) -> bool:
    message.DiscardUnknownFields()  # the JSON carries no unknown fields, so neither may the comparison
    return bool(message.SerializeToString() != payload)


def _nan_lossy(text: bytes, from_dict: Any, payload: bytes) -> bool:
    """True when a NaN of the message has a sign or payload that JSON's "NaN" loses."""
    return b'"NaN"' in text and from_dict(orjson.loads(text)).SerializeToString() != payload


#: Records converted together: numpy calls long enough to pay off, and memory bounded (protobuf's check of a
#: chunk parses it whole: 4,096 real-shaped records made a 138 MB process, 1,024 one of 80 MB).
_CHUNK_RECORDS = 1024


def _node_text(payload: bytes, fragments: _Fragments) -> bytes:
    """The JSON text of one node record, with ``_raw`` when its fields do not reproduce its bytes."""
    node = Node.FromString(payload)
    text = node_json(node, fragments)
    if _needs_raw(node, payload) or _nan_lossy(text, dict_to_node, payload):
        text = text[:-1] + (b"," if len(text) > 2 else b"") + b'"_raw":"' + base64.b64encode(payload) + b'"}'
    return text


def to_json(et_path: str | os.PathLike[str], json_path: str | os.PathLike[str]) -> int:
    """Write the JSON twin of ``et_path`` to ``json_path`` (streaming, atomic; ``.gz`` = gzip).

    Returns the number of nodes written. Chunks of records are converted at once by
    :class:`etkit.format.jsonfast.JsonWriter`, which hands the records it does not cover back to the
    per-record :func:`node_json`; both write the same text. A file that is not plainly well framed is
    read again record by record by the checking reader, which reports the fault. A FIFO or ``<(...)``,
    which can be read only once, goes through the checking reader directly.
    """
    if not os.path.isfile(et_path):
        return _write_json(et_path, json_path, chunked=False)
    try:
        return _write_json(et_path, json_path, chunked=True)
    except FramingFault:
        return _write_json(et_path, json_path, chunked=False)


def _write_json(et_path: str | os.PathLike[str], json_path: str | os.PathLike[str], *, chunked: bool) -> int:
    count = 0
    fragments = _Fragments()

    def slow(payload: bytes, index: int) -> bytes:
        try:
            return _node_text(payload, fragments)
        except DecodeError as exc:
            raise _bad(et_path, f"corrupt Node message ({exc})", index) from None

    with open_trace(et_path) as reader, atomic_output(json_path) as out:
        meta = _with_raw(metadata_to_dict(reader.metadata), reader.metadata, reader.metadata_record)
        out.write(b'{"format":"' + FORMAT_NAME.encode() + b'","version":1,"metadata":' + orjson.dumps(meta) + b',"nodes":[')
        if chunked:
            writer = JsonWriter()
            with open_maybe_gzip(et_path) as stream:
                for data, start, length in record_chunks(stream, _CHUNK_RECORDS):
                    def slow_at(payload: bytes, i: int, base: int = count) -> bytes:
                        return slow(payload, base + i + 1)
                    text = writer.chunk_json(data, start, length, slow_at)
                    out.write(text[1:] if count == 0 else text)  # the first node follows "[" without a comma
                    count += start.size
        else:
            records = reader.records()
            for batch in iter(lambda: list(itertools.islice(records, _CHUNK_RECORDS)), []):
                out.write((b",\n" if count else b"\n") + b",\n".join(slow(p, count + i + 1) for i, p in enumerate(batch)))
                count += len(batch)
        out.write(b"\n]}\n")
    return count


def _bad(path: str | os.PathLike[str], message: str, record: int | None = None) -> TraceFormatError:
    return TraceFormatError(path, message, record=record)


def _iter_dicts(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """``(index, object)``: index 0 is the metadata object, then one per node (JSON syntax checked)."""
    try:
        stream = open_maybe_gzip(path)
    except OSError as exc:
        raise _bad(path, f"cannot open ({exc.strerror or exc})") from None
    with stream:
        try:
            first_line = stream.readline()
        except (OSError, EOFError) as exc:
            raise _bad(path, f"cannot read ({exc})") from None
        if first_line.startswith(b'{"format":"' + FORMAT_NAME.encode()) and first_line.rstrip().endswith(b'"nodes":['):
            yield from _iter_line_layout(path, first_line, stream)
            return
        if first_line.rstrip(b"\r\n") == b"{" or first_line.startswith(b"{}{"):  # jsonizer's layout: streamed
            objects = _parsed_pieces(path, split_objects(first_line, stream))
            try:
                first = next(objects, None)
            except TraceFormatError:
                first = None  # pretty-printed, but not cut as the jsonizer cuts: read as a whole below
            else:
                if first is not None:
                    yield from _iter_parsed(path, itertools.chain([first], objects))
                    return
            stream = open_maybe_gzip(path)
            first_line = b""
        try:
            text = (first_line + stream.read()).decode("utf-8")
        except (UnicodeDecodeError, OSError, EOFError) as exc:
            raise _bad(path, f"not UTF-8 JSON text ({exc})") from None
        finally:
            stream.close()
    yield from _iter_parsed(path, _raw_decoded(path, text))


def _parsed_pieces(path: str | os.PathLike[str], pieces: Iterator[bytes]) -> Iterator[Any]:
    for index, piece in enumerate(pieces):
        try:
            yield orjson.loads(piece)
        except orjson.JSONDecodeError as exc:
            raise _bad(path, f"invalid JSON ({exc})", index) from None


def _iter_line_layout(path: str | os.PathLike[str], first_line: bytes, stream: Any) -> Iterator[tuple[int, Any]]:
    try:
        header = orjson.loads(first_line.rstrip()[: -len(b',"nodes":[')] + b"}")
    except orjson.JSONDecodeError as exc:
        raise _bad(path, f"bad header line ({exc})", 0) from None
    yield 0, header.get("metadata", {})
    index = 0
    closed = False
    for raw in stream:
        line = raw.strip()
        if not line:
            continue
        if line == b"]}":
            closed = True
            continue
        if closed:
            raise _bad(path, "text after the end of the document")
        index += 1
        try:
            yield index, orjson.loads(line[:-1] if line.endswith(b",") else line)
        except orjson.JSONDecodeError as exc:
            raise _bad(path, f"invalid JSON ({exc})", index) from None
    if not closed:
        raise _bad(path, "truncated document (no closing ]})")


def _raw_decoded(path: str | os.PathLike[str], text: str) -> Iterator[Any]:
    """The JSON values of ``text``, one after the other (any formatting, any separating whitespace)."""
    decoder = json.JSONDecoder()
    pos = index = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return
        try:
            data, pos = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise _bad(path, f"invalid JSON ({exc})", index) from None
        yield data
        index += 1


def _iter_parsed(path: str | os.PathLike[str], objects: Iterator[Any]) -> Iterator[tuple[int, Any]]:
    """Either one JSON twin document, or concatenated jsonizer objects (metadata first)."""
    index = 0
    for data in objects:
        if index == 0 and isinstance(data, dict) and data.get("format") == FORMAT_NAME:
            yield 0, data.get("metadata", {})
            nodes = data.get("nodes", [])
            if not isinstance(nodes, list):
                raise _bad(path, '"nodes" must be a list', 0)
            for index, item in enumerate(nodes, start=1):
                yield index, item
            index += 1
            continue
        yield index, data
        index += 1
    if index == 0:
        raise _bad(path, "no JSON object found")


def _convert(path: str | os.PathLike[str], index: int, data: Any, convert: Any) -> Any:
    what = "metadata" if index == 0 else "node"
    try:
        if not isinstance(data, dict):
            raise ValueError(f"a {what} must be a JSON object")
        return convert(data)
    except Exception as exc:  # noqa: BLE001 - any malformed content becomes one clean error
        raise _bad(path, f"bad {what} ({type(exc).__name__}: {exc})", index) from None


def _payload(data: dict[str, Any], cls: Any, encode: Any) -> bytes:
    """The record bytes of a message dict: its ``_raw`` bytes as they are, else ``encode(data)``."""
    if "_raw" in data:
        payload = raw_bytes(data)
        cls.FromString(payload)  # refuse bytes that are not this message
        return payload
    return bytes(encode(data))


def _metadata_payload(data: dict[str, Any]) -> bytes:
    return _payload(data, GlobalMetadata, lambda d: dict_to_metadata(d).SerializeToString())


def iter_json_trace(path: str | os.PathLike[str]) -> Iterator[GlobalMetadata | Node]:
    """The GlobalMetadata, then every Node, of a JSON twin or of jsonizer output (gzip sniffed)."""
    for index, data in _iter_dicts(path):
        yield _convert(path, index, data, dict_to_metadata if index == 0 else dict_to_node)


def from_json(json_path: str | os.PathLike[str], et_path: str | os.PathLike[str]) -> int:
    """Write the ``.et`` file described by a JSON twin (or jsonizer output); returns the node count.

    Records are restored exactly (``_raw`` bytes as they are); an empty node is refused.
    """
    items = _iter_dicts(json_path)
    index, data = next(items)
    count = 0
    encoder = NodeEncoder()

    def node_payload(data: dict[str, Any]) -> bytes:
        return _payload(data, Node, encoder.encode)

    with TraceWriter(et_path, _convert(json_path, index, data, _metadata_payload)) as writer:
        for index, data in items:
            payload = _convert(json_path, index, data, node_payload)
            if not payload:
                raise _bad(json_path, "empty node (id 0 and no other field) cannot be written", index)
            writer.write_record(payload)
            count += 1
    return count


def default_json_path(et_path: str | os.PathLike[str], suffix: str = ".json") -> Path:
    """``x.et`` (or ``x.et.gz``) -> ``x`` + ``suffix`` (``.json``; ``.jsonized.txt`` for the jsonizer layout)."""
    name = Path(et_path).name
    for ending in (".et.gz", ".et"):
        if name.endswith(ending):
            return Path(et_path).with_name(name[: -len(ending)] + suffix)
    return Path(et_path).with_name(name + suffix)
