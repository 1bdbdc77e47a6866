"""The reference jsonizer's layout (``chakra_jsonizer`` of mlc-chakra 1.0.0), written byte for byte.

``chakra_jsonizer`` writes ``MessageToJson(message)`` of the GlobalMetadata and then of every node, one
after the other with nothing between them (``}{``): protobuf's JSON mapping, pretty-printed with an
indent of 2, non-ASCII characters escaped. Scripts written for that output read this file unchanged.
It is not lossless (unknown fields and non-canonical encodings are gone); ``from-json`` reads it back.

Most nodes are printed by orjson from :func:`etkit.format.protojson.node_to_dict` (the same document,
and the same text wherever the text is ASCII without DEL and holds no float: orjson differs from
Python's ``json`` there); the others go through protobuf's ``MessageToJson`` itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import IO

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from ..errors import TraceFormatError
from ..fileio import atomic_output
from .protojson import node_to_dict
from .schema import Node
from .stream import open_trace

__all__ = ["to_jsonizer", "jsonizer_text", "split_objects"]

#: JSON keys whose values orjson and Python's ``json`` may print differently.
_FLOAT_KEYS = (b'"floatVal"', b'"floatList"', b'"doubleVal"', b'"doubleList"')


def jsonizer_text(node: Node) -> bytes:
    """What ``chakra_jsonizer`` writes for ``node``: ``MessageToJson(node)`` as UTF-8."""
    text = orjson.dumps(node_to_dict(node), option=orjson.OPT_INDENT_2)
    if text.isascii() and b"\x7f" not in text and not any(key in text for key in _FLOAT_KEYS):
        return text
    return json_format.MessageToJson(node).encode()


def to_jsonizer(et_path: str | os.PathLike[str], json_path: str | os.PathLike[str]) -> int:
    """Write what ``chakra_jsonizer --input_filename ET --output_filename JSON`` writes (streaming,
    atomic; ``.gz`` = gzip). Returns the number of nodes."""
    count = 0
    with open_trace(et_path) as reader, atomic_output(json_path) as out:
        out.write(json_format.MessageToJson(reader.metadata).encode())
        parts: list[bytes] = []
        for count, record in enumerate(reader.records(), start=1):
            try:
                node = Node.FromString(record)
            except DecodeError as exc:
                raise TraceFormatError(et_path, f"corrupt Node message ({exc})", record=count) from None
            parts.append(jsonizer_text(node))
            if len(parts) == 1024:
                out.write(b"".join(parts))
                parts.clear()
        out.write(b"".join(parts))
    return count


#: Where one object of the layout ends and the next begins: a line that starts ``}{`` (a JSON string
#: holds no raw newline, so only the closing brace of a top-level object can start a line so).
_BOUNDARY = b"\n}{"
_BLOCK = 1 << 20


def split_objects(head: bytes, stream: IO[bytes]) -> Iterator[bytes]:
    """The text of each top-level object of the jsonizer's layout: ``head`` (what was read of the
    stream already), then the rest of ``stream``, read a block at a time."""
    buf = head
    if buf.startswith(b"{}"):  # an empty GlobalMetadata prints as {} on no line of its own
        yield b"{}"
        buf = buf[2:]
    lead = b""
    while True:
        block = stream.read(_BLOCK)
        buf += block
        pieces = buf.split(_BOUNDARY)
        for piece in pieces[:-1]:
            yield lead + piece + b"\n}"
            lead = b"{"
        buf = pieces[-1]
        if not block:
            break
    if buf.strip():
        yield lead + buf
