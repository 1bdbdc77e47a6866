"""The communication op table: which PyTorch ops and GPU kernels are collectives or point-to-point,
their Chakra node type and ``comm_type``, and how to read their message size, peer, tag and group.

Names are normalised (family prefix dropped, ``_`` removed, lower-cased) and matched against
:data:`KINDS` in order, so every spelling maps to the same kind: ``c10d::_allgather_base_``,
``_c10d_functional::all_gather_into_tensor``, ``gloo:all_gather`` and ``ncclDevKernel_AllGather_RING_LL``
are all ALL_GATHER. Sizes are in bytes, from the tensors' ``numel × itemsize``; see :func:`message_bytes`
for which argument each op sends.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from ..format.schema import CommType, NodeType
from ..records import record
from .host import is_tensor

__all__ = ["CommKind", "classify_op", "classify_kernel", "message_bytes", "tensor_bytes", "group_name_arg", "dtype_bytes",
           "p2p_peer_and_tag", "Family", "is_comm_kernel", "CommArgumentError", "process_group_entries"]


class Family:
    """Where a communication op sits in the chain that one collective call produces."""

    FUNCTIONAL = "functional"  # _c10d_functional::* (torch.distributed._functional_collectives)
    DISPATCH = "dispatch"      # c10d::* dispatcher op
    PARAM = "param"            # record_param_comms
    BACKEND = "backend"        # gloo:* / nccl:* record functions: the backend doing the work
    KERNEL = "kernel"          # GPU NCCL kernel


@record(frozen=True)
class CommKind:
    """What one communication op is."""

    family: str
    node_type: NodeType
    comm_type: CommType | None  # None for send/recv
    key: str                    # normalised name, e.g. "allgatherbase"


#: (substring of the normalised name, node type, comm type), first match wins.
KINDS: tuple[tuple[str, NodeType, CommType | None], ...] = (
    ("reducescatter", NodeType.COMM_COLL_NODE, CommType.REDUCE_SCATTER),
    ("allreduce", NodeType.COMM_COLL_NODE, CommType.ALL_REDUCE),
    ("allgather", NodeType.COMM_COLL_NODE, CommType.ALL_GATHER),
    ("alltoall", NodeType.COMM_COLL_NODE, CommType.ALL_TO_ALL),
    ("broadcast", NodeType.COMM_COLL_NODE, CommType.BROADCAST),
    ("barrier", NodeType.COMM_COLL_NODE, CommType.BARRIER),
    ("scatter", NodeType.COMM_COLL_NODE, CommType.SCATTER),
    ("gather", NodeType.COMM_COLL_NODE, CommType.GATHER),
    ("reduce", NodeType.COMM_COLL_NODE, CommType.REDUCE),
    ("send", NodeType.COMM_SEND_NODE, None),
    ("recv", NodeType.COMM_RECV_NODE, None),
)

_FAMILY_PREFIXES = (
    ("_c10d_functional::", Family.FUNCTIONAL), ("c10d_functional::", Family.FUNCTIONAL),
    ("c10d::", Family.DISPATCH), ("gloo:", Family.BACKEND), ("nccl:", Family.BACKEND),
    ("xccl:", Family.BACKEND), ("mpi:", Family.BACKEND),
)
#: Ops of a comm family that are not communication: waits, wrappers, bookkeeping.
_NOT_COMM = re.compile(r"wait|wrap|^(coalesced|startcoalescing|endcoalescing|monitoredbarrier|getrank|getsize)$")

#: Dispatcher (c10d::) ops: index of the input argument holding the buffer whose bytes are the message.
#: c10d ops take their output buffers as arguments too, so this is always an index into the inputs.
_DISPATCH_SIZE_ARG = {
    "allgather": 1, "allgatherbase": 1, "allgatherintotensorcoalesced": 1, "allgathercoalesced": 1,
    "reducescatter": 1, "reducescatterbase": 1, "reducescattertensorcoalesced": 1,
    "alltoall": 1, "alltoallbase": 1, "gather": 1,
    "scatter": 0,  # output_tensors: each rank's chunk (the root's inputs are the whole list)
}


def _normalise(name: str) -> tuple[str, str] | None:
    for prefix, family in _FAMILY_PREFIXES:
        if name.startswith(prefix):
            return family, name[len(prefix):].replace("_", "").lower()
    if name == "record_param_comms":
        return Family.PARAM, ""
    return None


def _match(key: str) -> tuple[NodeType, CommType | None] | None:
    for needle, node_type, comm_type in KINDS:
        if needle in key:
            return node_type, comm_type
    return None


def classify_op(name: str, extra: dict[str, Any] | None = None, inputs: list[Any] | None = None) -> CommKind | None:
    """The communication kind of host op ``name``; ``None`` for compute ops, waits and wrappers."""
    found = _normalise(name)
    if found is None:
        return None
    family, key = found
    if family == Family.PARAM:
        collective = (extra or {}).get("collective_name")
        if not collective and inputs and len(inputs) > 4 and isinstance(inputs[4], str):
            collective = inputs[4]  # 1.0.x: record_param_comms(tensors, seq, (pg_name, desc), ?, "broadcast", ...)
        key = str(collective or "").replace("_", "").lower()
        if not key:
            return None
    elif _NOT_COMM.search(key):
        return None
    matched = _match(key)
    if matched is None:
        return None
    return CommKind(family, matched[0], matched[1], key)


def classify_kernel(name: str, parent_kind: CommKind | None = None) -> CommKind | None:
    """The kind of GPU kernel ``name`` (``ncclDevKernel_*``/``ncclKernel_*``); ``None`` for other kernels.

    ``SendRecv`` kernels and NCCL kernels of names not in :data:`KINDS` take their kind from the
    collective op that launched them (``parent_kind``: send, recv or all-to-all, which NCCL implements
    with point-to-point kernels); without one they are ``None`` too: see :func:`is_comm_kernel`.
    """
    if not is_comm_kernel(name):
        return None
    key = name.split("_", 1)[1].replace("_", "").lower() if "_" in name else name.lower()
    matched = None if "sendrecv" in key else _match(key)
    if matched is not None:
        return CommKind(Family.KERNEL, matched[0], matched[1], key)
    if parent_kind is not None:  # folded into the launching collective, whose kind the host op says
        return CommKind(Family.KERNEL, parent_kind.node_type, parent_kind.comm_type, parent_kind.key)
    # A SendRecv kernel alone may be a send, a recv or part of an all-to-all; any other name is one this
    # table does not know. Neither is guessed (the reference calls both ALL_TO_ALL / ALL_REDUCE).
    return None


def is_comm_kernel(name: str) -> bool:
    """Whether GPU kernel ``name`` is an NCCL kernel (known kind or not)."""
    return name.startswith(("ncclDevKernel", "ncclKernel"))


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor nested in ``value`` (``numel × itemsize`` of each 6-tuple)."""
    if type(value) is not list:
        return 0
    if is_tensor(value):
        return value[3] * value[4]
    return sum(tensor_bytes(item) for item in value)


_DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
                "long": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "int16": 2, "char": 1, "int8": 1,
                "byte": 1, "uint8": 1, "bool": 1, "cfloat": 8, "cdouble": 16,
                # Kineto's Input type names (C++ spellings)
                "longint": 8, "signedchar": 1, "unsignedchar": 1, "complex<float>": 8, "complex<double>": 16}


def dtype_bytes(name: str) -> int | None:
    """Bytes per element of a dtype name as traces write it (``Float``, ``BFloat16``, Kineto's ``float``,
    ``long int``, ``c10::BFloat16``...); None when unknown."""
    key = name.lower().replace("c10::", "").replace(" ", "").replace("torch.", "")
    return _DTYPE_BYTES.get(key)


def message_bytes(kind: CommKind, inputs: list[Any] | None, outputs: list[Any] | None,
                  extra: dict[str, Any] | None = None) -> int:
    """Bytes one rank contributes to the operation (the Chakra ``comm_size`` convention).

    all_reduce/broadcast/reduce/send/recv: the buffer; all_gather/gather: the local input shard;
    reduce_scatter: the full input; all_to_all: the local input (uneven splits differ across ranks);
    scatter: the chunk each rank receives; barrier: 0.
    """
    if kind.comm_type == CommType.BARRIER:
        return 0
    inputs = inputs or []
    if kind.family == Family.PARAM and extra and extra.get("in_msg_nelems") is not None and extra.get("dtype"):
        itemsize = dtype_bytes(str(extra["dtype"]))
        if itemsize:
            return int(extra["in_msg_nelems"]) * itemsize
    if kind.family == Family.DISPATCH:
        index = _DISPATCH_SIZE_ARG.get(kind.key, 0)
        return tensor_bytes(inputs[index]) if index < len(inputs) else 0
    if kind.family in (Family.FUNCTIONAL, Family.PARAM):
        return tensor_bytes(inputs[0]) if inputs else 0
    return tensor_bytes(inputs)


def group_name_arg(inputs: list[Any] | None, types: list[str] | None) -> str | None:
    """The process-group name passed as a string argument (functional collectives, record_param_comms)."""
    if not inputs or not types:
        return None
    for value, type_name in zip(reversed(inputs), reversed(types)):
        if type_name == "String" and isinstance(value, str) and value.isdigit():
            return value
        if type_name.startswith("Tuple[String") and isinstance(value, list) and value and isinstance(value[0], str):
            return value[0]  # record_param_comms 1.0.x: (pg_name, pg_desc)
    return None


class CommArgumentError(ValueError):
    """A communication op's argument of the wrong type or range; the caller adds file, rank and node."""


def p2p_peer_and_tag(kind: CommKind, inputs: list[Any] | None) -> tuple[int | None, int | None]:
    """Group-local peer rank and tag of a dispatcher ``send``/``recv_`` (``(tensors, pg, peer, tag)``).

    ``(None, None)`` for ops of other families (they carry no peer); a dispatcher op whose peer or tag is
    missing or not a non-negative integer raises :class:`CommArgumentError`.
    """
    if kind.family != Family.DISPATCH:
        return None, None
    if not inputs or len(inputs) < 3:
        raise CommArgumentError(f"has {len(inputs or [])} arguments; expected (tensors, group, peer, tag)")
    peer = inputs[2]
    if type(peer) is not int or peer < 0:
        raise CommArgumentError(f"argument 2 (peer rank) is {peer!r}, not a rank")
    tag = inputs[3] if len(inputs) > 3 else 0
    if type(tag) is not int:
        raise CommArgumentError(f"argument 3 (tag) is {tag!r}, not an integer")
    return peer, tag


def process_group_entries(inputs: list[Any] | None, where: str) -> list[dict[str, Any]]:
    """The group descriptions of a ``## process_group:init ##`` op: its string argument is a JSON list (or,
    in older traces, a Python literal) of ``{pg_name, pg_desc, ranks, group_size, ...}`` objects."""
    from ..literal import LiteralError, parse_literal

    for value in inputs or []:
        if not isinstance(value, str):
            continue
        try:
            entries = orjson.loads(value)
        except orjson.JSONDecodeError:
            try:
                entries = parse_literal(value, what=where)
            except LiteralError:
                continue
        if isinstance(entries, list):
            return [e for e in entries if isinstance(e, dict) and "pg_name" in e]
    return []
