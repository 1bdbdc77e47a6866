"""The Chakra ET protobuf schema: its enums, its attribute kinds, and its message classes, built on first use.

The descriptors are assembled in Python from the field table of ``et_def.proto`` (package
``ChakraProtoMsg``) and registered in a private descriptor pool, so etkit needs no ``protoc``, ships
no generated code that breaks when the protobuf runtime changes, and never clashes with another
package that registers the same proto names in the default pool.

The enums (:class:`NodeType`, :class:`CommType`) and the kind tables need no protobuf. The message classes
(:data:`Node`, :data:`GlobalMetadata`, ...) are made, and protobuf imported (about 0.03 s of CPU), when one of
them is first read from this module: a verb whose work is all at byte level (``convert pytorch`` writes its
records through :mod:`etkit.format.assemble`) never pays for it.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.protobuf import descriptor_pb2

__all__ = [
    "AttributeProto",
    "CommType",
    "GlobalMetadata",
    "IOInfo",
    "Node",
    "NodeType",
    "Tensor",
    "ATTR_KINDS",
    "LIST_KINDS",
    "SCHEMA_VERSION",
    "protobuf_backend",
]

PACKAGE = "ChakraProtoMsg"
#: ``GlobalMetadata.version`` of the files etkit writes: the Chakra schema they follow, ``et_def.proto`` as
#: mlc-chakra 1.0.0 ships it and as its generator labels it (the same proto that older files call "0.0.4";
#: Chakra's PyTorch and text converters leave the field empty).
SCHEMA_VERSION = "1.0.0"


class NodeType(enum.IntEnum):
    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CommType(enum.IntEnum):
    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


# (kind, list wrapper message) in AttributeProto oneof order: value kinds take field numbers 3, 5, 7, ... and
# their list forms 4, 6, 8, ...; each kind's protobuf type is ``FieldDescriptorProto.TYPE_<KIND>``.
_SCALARS: tuple[tuple[str, str], ...] = (
    ("double", "DoubleList"),
    ("float", "FloatList"),
    ("int32", "Int32List"),
    ("int64", "Int64List"),
    ("uint32", "Uint32List"),
    ("uint64", "Uint64List"),
    ("sint32", "Sint32List"),
    ("sint64", "Sint64List"),
    ("fixed32", "Fixed32List"),
    ("fixed64", "Fixed64List"),
    ("sfixed32", "Sfixed32List"),
    ("sfixed64", "Sfixed64List"),
    ("bool", "BoolList"),
    ("string", "StringList"),
    ("bytes", "BytesList"),
)

#: Every oneof member name of ``AttributeProto.value``, e.g. ``int64_val``, ``bool_list``.
ATTR_KINDS: tuple[str, ...] = tuple(f"{k}_{form}" for k, _ in _SCALARS for form in ("val", "list"))
#: The field number of each oneof member of ``AttributeProto.value`` (``double_val`` 3, ``double_list`` 4, ...).
ATTR_FIELD_NUMBERS: dict[str, int] = {kind: number for number, kind in enumerate(ATTR_KINDS, start=3)}
#: The ``*_list`` members.
LIST_KINDS: frozenset[str] = frozenset(k for k in ATTR_KINDS if k.endswith("_list"))


def _field(msg: descriptor_pb2.DescriptorProto, name: str, number: int, ftype: int, *,
           repeated: bool = False, type_name: str = "", oneof: int | None = None) -> None:
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as _FDP

    f = msg.field.add(name=name, number=number, type=ftype)
    f.label = _FDP.LABEL_REPEATED if repeated else _FDP.LABEL_OPTIONAL
    if type_name:
        f.type_name = f".{PACKAGE}.{type_name}"
    if oneof is not None:
        f.oneof_index = oneof


def _enum(fdp: descriptor_pb2.FileDescriptorProto, cls: type[enum.IntEnum]) -> None:
    e = fdp.enum_type.add(name=cls.__name__ if cls is NodeType else "CollectiveCommType")
    for member in cls:
        e.value.add(name=member.name, number=member.value)


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    from google.protobuf import descriptor_pb2

    _FDP = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="etkit/et_def.proto", package=PACKAGE, syntax="proto3")
    _enum(fdp, NodeType)
    _enum(fdp, CommType)

    for kind, list_name in _SCALARS:
        lst = fdp.message_type.add(name=list_name)
        _field(lst, "values", 1, getattr(_FDP, f"TYPE_{kind.upper()}"), repeated=True)

    attr = fdp.message_type.add(name="AttributeProto")
    _field(attr, "name", 1, _FDP.TYPE_STRING)
    _field(attr, "doc_string", 2, _FDP.TYPE_STRING)
    attr.oneof_decl.add(name="value")
    for kind, list_name in _SCALARS:
        number = ATTR_FIELD_NUMBERS[f"{kind}_val"]
        _field(attr, f"{kind}_val", number, getattr(_FDP, f"TYPE_{kind.upper()}"), oneof=0)
        _field(attr, f"{kind}_list", number + 1, _FDP.TYPE_MESSAGE, type_name=list_name, oneof=0)

    meta = fdp.message_type.add(name="GlobalMetadata")
    _field(meta, "version", 1, _FDP.TYPE_STRING)
    _field(meta, "attr", 2, _FDP.TYPE_MESSAGE, repeated=True, type_name="AttributeProto")

    io = fdp.message_type.add(name="IOInfo")
    for i, name in enumerate(("values", "shapes", "types"), start=1):
        _field(io, name, i, _FDP.TYPE_STRING)

    tensor = fdp.message_type.add(name="Tensor")
    for i, name in enumerate(("tensor_id", "storage_id", "offset", "num_elem", "elem_bytes"), start=1):
        _field(tensor, name, i, _FDP.TYPE_UINT64)
    _field(tensor, "device", 6, _FDP.TYPE_STRING)

    node = fdp.message_type.add(name="Node")
    _field(node, "id", 1, _FDP.TYPE_UINT64)
    _field(node, "name", 2, _FDP.TYPE_STRING)
    _field(node, "type", 3, _FDP.TYPE_ENUM, type_name="NodeType")
    _field(node, "ctrl_deps", 4, _FDP.TYPE_UINT64, repeated=True)
    _field(node, "data_deps", 5, _FDP.TYPE_UINT64, repeated=True)
    _field(node, "start_time_micros", 6, _FDP.TYPE_UINT64)
    _field(node, "duration_micros", 7, _FDP.TYPE_UINT64)
    _field(node, "inputs", 8, _FDP.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "outputs", 9, _FDP.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "attr", 10, _FDP.TYPE_MESSAGE, repeated=True, type_name="AttributeProto")

    # Not part of Chakra: lets one C call parse (and so check) many node records at once.
    batch = fdp.message_type.add(name="EtkitNodeBatch")
    _field(batch, "nodes", 1, _FDP.TYPE_MESSAGE, repeated=True, type_name="Node")
    return fdp


def _message_classes() -> dict[str, type]:
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    try:  # protobuf >= 4.22
        from google.protobuf.message_factory import GetMessageClass

        def make(full_name: str) -> type:
            return GetMessageClass(pool.FindMessageTypeByName(full_name))
    except ImportError:  # pragma: no cover - protobuf 4.21
        from google.protobuf.message_factory import MessageFactory

        factory = MessageFactory(pool)

        def make(full_name: str) -> type:
            return factory.GetPrototype(pool.FindMessageTypeByName(full_name))  # type: ignore[attr-defined,no-any-return]

    names = ["Node", "GlobalMetadata", "AttributeProto", "IOInfo", "Tensor", "EtkitNodeBatch"]
    names += [list_name for _, list_name in _SCALARS]
    return {n: make(f"{PACKAGE}.{n}") for n in names}


#: This module's names for its message classes (``NodeBatch`` is etkit's ``EtkitNodeBatch``).
_MESSAGES = {"Node": "Node", "GlobalMetadata": "GlobalMetadata", "AttributeProto": "AttributeProto",
             "IOInfo": "IOInfo", "Tensor": "Tensor", "NodeBatch": "EtkitNodeBatch"}

if TYPE_CHECKING:  # the classes are made at run time from the descriptors: to a type checker, any message
    Node = Any
    GlobalMetadata = Any
    AttributeProto = Any
    IOInfo = Any
    Tensor = Any
    NodeBatch = Any


def __getattr__(name: str) -> Any:
    """The message classes, made (with every other one) on first use and then kept as this module's globals."""
    if name not in _MESSAGES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    classes = _message_classes()
    namespace = globals()
    for alias, full in _MESSAGES.items():
        namespace.setdefault(alias, classes[full])
    return namespace[name]


def protobuf_backend() -> str:
    """Name of the protobuf runtime in use (``upb`` is the fast C one)."""
    try:
        from google.protobuf.internal import api_implementation

        return str(api_implementation.Type())
    except ImportError:  # pragma: no cover
        return "unknown"
