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

import itertools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: One node's JSON text -> its record, or None for the general path (:class:`etkit.format.protojson.LineEncoder`).
LineCoder = Callable[[bytes], "bytes | None"]
#: Many node lines -> their framed records: ``(buf, start, end, out) -> (size, count, stop)``: the records of the
#: lines of ``buf`` from ``start`` up to the first one it does not take (which starts at ``stop``), in ``out[:size]``
#: (a bytearray it grows as needed: ``etkit.format._jsonin.lines``).
LinesCoder = Callable[[bytearray, int, int, bytearray], "tuple[int, int, int]"]
#: Where those records go as they are made: ``(framed, count)``, ``framed`` valid only during the call
#: (``TraceWriter.write_framed``).
FramedSink = Callable[[memoryview, int], None]

from ..errors import TraceFormatError
from ..fileio import atomic_output, open_maybe_gzip
from ..records import record
from .jsonfast import FramingFault, TwinWriter, iter_blocks
from .jsonfast import metadata_json as fast_metadata_json

__all__ = ["to_json", "from_json", "iter_json_trace", "FORMAT_NAME"]

FORMAT_NAME = "etkit-et-json"

#: The size of each read of the twin's lines for :data:`LinesCoder`: the buffer of the gzip stream that
#: ``open_maybe_gzip`` opens, so that each read (``read1``) is one read of the stream under it, of the size that
#: reading the lines one by one reads.
_RUN_READ = 1 << 20


@record(frozen=True)
class LineRuns:
    """The C path of the twin's node lines: runs of them encoded by ``encode``, their records given to ``write``."""

    encode: LinesCoder
    write: FramedSink


@record(frozen=True)
class WrittenRun:
    """``count`` consecutive node lines whose records :attr:`LineRuns.write` has been given."""

    count: int


# to-json imports no protobuf, numpy or orjson unless a record needs them (start-up is most of the CPU
# time on a file of 10,000 nodes); the readers import them when they run.


def _metadata_json(payload: bytes) -> bytes:
    """The JSON text of the GlobalMetadata record (a canonical one read here, any other by protobuf)."""
    text = fast_metadata_json(payload)
    if text is None:
        from .protojson import metadata_json
        text = metadata_json(payload)
    return text


def to_json(et_path: str | os.PathLike[str], json_path: str | os.PathLike[str]) -> int:
    """Write the JSON twin of ``et_path`` to ``json_path`` (streaming, atomic; ``.gz`` = gzip).

    Returns the number of nodes written. :class:`etkit.format.jsonfast.TwinWriter` reads the
    canonical records off their bytes and hands the others back to the per-record
    :func:`etkit.format.protojson.node_text`; both write the same text. A file that is not plainly
    well framed is read again record by record by the checking reader, which reports the fault. A FIFO
    or ``<(...)``, which can be read only once, goes through the checking reader directly.
    """
    if os.path.isfile(et_path):
        try:
            return _write_fast(et_path, json_path)
        except FramingFault:
            pass
    return _write_checked(et_path, json_path)


def _header(metadata: bytes) -> bytes:
    return b'{"format":"' + FORMAT_NAME.encode() + b'","version":1,"metadata":' + metadata + b',"nodes":['


class _Slow:
    """The per-record path (protobuf), set up when a record first needs it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.fragments: Any = None

    def text(self, payload: bytes, index: int) -> bytes:
        from google.protobuf.message import DecodeError

        from .protojson import Fragments, node_text
        if self.fragments is None:
            self.fragments = Fragments()
        try:
            return node_text(payload, self.fragments)
        except DecodeError as exc:
            raise _bad(self.path, f"corrupt Node message ({exc})", index) from None


def _write_fast(et_path: str | os.PathLike[str], json_path: str | os.PathLike[str]) -> int:
    count = 0
    writer, slow = TwinWriter(), _Slow(et_path)
    with open_maybe_gzip(et_path) as stream:
        blocks = iter_blocks(stream)
        first = next(blocks, None)
        if first is None:
            raise FramingFault("no GlobalMetadata record")
        head, head_bounds = first
        try:
            metadata = _metadata_json(head[head_bounds[0]:head_bounds[1]])
        except Exception:  # noqa: BLE001 - a corrupt GlobalMetadata: the checking reader reports it
            raise FramingFault("GlobalMetadata") from None
        with atomic_output(json_path) as out:
            out.write(_header(metadata))
            skip = 1
            for buf, bounds in itertools.chain([first], blocks):
                def slow_at(payload: bytes, i: int, base: int = count) -> bytes:
                    return slow.text(payload, base + i + 1)
                texts = writer.texts(buf, bounds, skip, slow_at)
                if texts:
                    out.write((b",\n" if count else b"\n") + b",\n".join(texts))
                count += len(bounds) // 2 - skip
                skip = 0
            out.write(b"\n]}\n")
    return count


def _write_checked(et_path: str | os.PathLike[str], json_path: str | os.PathLike[str]) -> int:
    """The checking reader's way: one record at a time, each through protobuf; faults reported."""
    from .protojson import metadata_json
    from .stream import open_trace

    count = 0
    slow = _Slow(et_path)
    with open_trace(et_path) as reader, atomic_output(json_path) as out:
        out.write(_header(metadata_json(reader.metadata_record)))
        records = reader.records()
        for batch in iter(lambda: list(itertools.islice(records, 1024)), []):
            out.write((b",\n" if count else b"\n") + b",\n".join(slow.text(p, count + i + 1) for i, p in enumerate(batch)))
            count += len(batch)
        out.write(b"\n]}\n")
    return count


def _bad(path: str | os.PathLike[str], message: str, record: int | None = None) -> TraceFormatError:
    return TraceFormatError(path, message, record=record)


def _iter_dicts(path: str | os.PathLike[str], encode_line: LineCoder | None = None,
                runs: LineRuns | None = None) -> Iterator[tuple[int, Any]]:
    """``(index, object)``: index 0 is the metadata object, then one per node (JSON syntax checked).

    With ``encode_line``, a node line of the twin's layout that it encodes comes as its record
    (``bytes``) instead of its object; with ``runs``, a run of such lines that it encodes is written at once and
    comes as one :class:`WrittenRun` (its index that of its first line), the other lines as before."""
    from .jsonizer import split_objects
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
            yield from _iter_line_layout(path, first_line, stream, encode_line, runs)
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
    import orjson
    for index, piece in enumerate(pieces):
        try:
            yield orjson.loads(piece)
        except orjson.JSONDecodeError as exc:
            raise _bad(path, f"invalid JSON ({exc})", index) from None


def _iter_line_layout(path: str | os.PathLike[str], first_line: bytes, stream: Any,
                      encode_line: LineCoder | None = None, runs: LineRuns | None = None) -> Iterator[tuple[int, Any]]:
    import orjson
    try:
        header = orjson.loads(first_line.rstrip()[: -len(b',"nodes":[')] + b"}")
    except orjson.JSONDecodeError as exc:
        raise _bad(path, f"bad header line ({exc})", 0) from None
    yield 0, header.get("metadata", {})
    index = 0
    closed = False
    for raw in (stream if runs is None else _line_runs(stream, runs)):
        if isinstance(raw, WrittenRun):  # (lines of node objects only: never blank, never the closing line)
            if closed:
                raise _bad(path, "text after the end of the document")
            yield index + 1, raw
            index += raw.count
            continue
        line = raw.strip()
        if not line:
            continue
        if line == b"]}":
            closed = True
            continue
        if closed:
            raise _bad(path, "text after the end of the document")
        index += 1
        text = line[:-1] if line.endswith(b",") else line
        record = encode_line(text) if encode_line is not None else None
        if record is not None:
            yield index, record
            continue
        try:
            yield index, orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise _bad(path, f"invalid JSON ({exc})", index) from None
    if not closed:
        raise _bad(path, "truncated document (no closing ]})")


def _line_runs(stream: Any, runs: LineRuns) -> Iterator[bytes | WrittenRun]:
    """The lines of ``stream`` (each with its ``\\n``, as iterating over it gives them), where ``runs`` takes a
    run of them that run written and its :class:`WrittenRun` instead. The stream is read into one buffer, each read
    one ``readinto1`` of :data:`_RUN_READ` bytes after the line that the reads so far have not ended: a gzip stream
    is read as reading it line by line reads it, so that a fault in it comes after the same lines."""
    buf, out = bytearray(2 * _RUN_READ), bytearray()  # (both kept from read to read: no fresh pages)
    held = 0  # buf[:held]: the start of a line not ended in the reads so far
    while True:
        if held + _RUN_READ > len(buf):  # a line longer than the buffer: one twice as big
            buf.extend(bytes(len(buf)))
        with memoryview(buf) as view:
            got = stream.readinto1(view[held:held + _RUN_READ])
        if not got:
            break
        size = held + got
        end = buf.rfind(b"\n", held, size) + 1
        if end:
            yield from _runs(buf, end, out, runs)
            held = size - end
            buf[:held] = buf[end:size]
        else:
            held = size
    if held:
        yield bytes(buf[:held])


def _runs(buf: bytearray, end: int, out: bytearray, runs: LineRuns) -> Iterator[bytes | WrittenRun]:
    """The whole lines of ``buf[:end]``, runs that ``runs`` takes written and given as :class:`WrittenRun`."""
    pos = 0
    while pos < end:
        size, count, stop = runs.encode(buf, pos, end, out)
        if count:
            with memoryview(out) as view:
                runs.write(view[:size], count)
            yield WrittenRun(count)
        if stop >= end:
            return
        after = buf.index(b"\n", stop) + 1
        yield bytes(buf[stop:after])
        pos = after


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
        from .protojson import raw_bytes
        payload = raw_bytes(data)
        cls.FromString(payload)  # refuse bytes that are not this message
        return payload
    return bytes(encode(data))


def _metadata_payload(data: dict[str, Any]) -> bytes:
    from .protojson import dict_to_metadata
    from .schema import GlobalMetadata
    return _payload(data, GlobalMetadata, lambda d: dict_to_metadata(d).SerializeToString())


def iter_json_trace(path: str | os.PathLike[str]) -> Iterator[Any]:
    """The GlobalMetadata, then every Node, of a JSON twin or of jsonizer output (gzip sniffed)."""
    from .protojson import dict_to_metadata, dict_to_node
    for index, data in _iter_dicts(path):
        yield _convert(path, index, data, dict_to_metadata if index == 0 else dict_to_node)


def from_json(json_path: str | os.PathLike[str], et_path: str | os.PathLike[str]) -> int:
    """Write the ``.et`` file described by a JSON twin (or jsonizer output); returns the node count.

    Records are restored exactly (``_raw`` bytes as they are); an empty node is refused.
    """
    from . import protojson
    from .schema import Node
    from .stream import TraceWriter
    encoder = protojson.NodeEncoder()
    kernel = protojson.JSONIN
    opened: list[TraceWriter] = []  # the writer, once the metadata has opened it (node lines come after it)
    runs = None if kernel is None else LineRuns(kernel.lines, lambda framed, n: opened[0].write_framed(framed, n))
    items = _iter_dicts(json_path, protojson.LineEncoder(encoder).encode, runs)
    index, data = next(items)
    count = 0

    def node_payload(data: dict[str, Any]) -> bytes:
        return _payload(data, Node, encoder.encode)

    with TraceWriter(et_path, _convert(json_path, index, data, _metadata_payload)) as writer:
        opened.append(writer)
        for index, data in items:
            if type(data) is WrittenRun:
                count += data.count
                continue
            payload = data if type(data) is bytes else _convert(json_path, index, data, node_payload)
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
