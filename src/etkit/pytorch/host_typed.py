"""The typed fast path of the host-trace reader (:mod:`etkit.pytorch.host`): msgspec decodes a chunk of nodes
straight into these records, no dict per node or attribute. The reader imports this module (and msgspec) only
when a chunk takes that path: where the C kernel ``etkit.pytorch._hostops`` is built, its scan reads the
common nodes of a document without it.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import MsgspecError, Raw

__all__ = ["Attr", "IO", "Node", "EMPTY", "UNSET", "LINK_FIELDS", "MsgspecError", "Raw", "decode_nodes"]

#: A field the node does not have.
UNSET = msgspec.UNSET

# Every field is ``Any`` (checked by the reader's ``_Compactor.build`` as on the dict path); only the shape (objects, lists)
# is typed. msgspec reads JSON as orjson does (tests/pytorch/test_host.py compares them), except integers
# beyond 64 bits (orjson: a float), which the reader's ``_LONG_NUMBER`` check sends to the dict path.


class Attr(msgspec.Struct, gc=False):
    name: Any
    value: Any = None


EMPTY = msgspec.Raw(b"[]")


class IO(msgspec.Struct, gc=False):
    values: Any = []
    shapes: msgspec.Raw = EMPTY  # the JSON text: shapes and types repeat, their str() is looked up by it
    types: msgspec.Raw = EMPTY


class Node(msgspec.Struct, gc=False):
    id: Any = None
    name: Any = None
    ctrl_deps: Any = msgspec.UNSET
    inputs: IO | None = None
    outputs: IO | None = None
    attrs: list[Attr] = []
    ts: Any = msgspec.UNSET  # the fields of a linked ("host + device") trace
    inclusive_dur: Any = msgspec.UNSET
    exclusive_dur: Any = msgspec.UNSET
    cat: Any = msgspec.UNSET
    stream: Any = msgspec.UNSET
    pg_name: Any = msgspec.UNSET


LINK_FIELDS = ("ts", "inclusive_dur", "exclusive_dur", "cat", "stream", "pg_name")
decode_nodes = msgspec.json.Decoder(list[Node]).decode
