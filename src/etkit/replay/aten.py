"""Re-running the recorded ATen operator of a converted PyTorch node with tensors of the recorded shapes.

A converted node carries its op schema (attribute ``op_schema``) and its inputs as IOInfo strings: the
Python ``str()`` of the PyTorch ET ``values``/``shapes``/``types`` lists. They are read with
:func:`etkit.literal.parse_literal` (bounded; nothing is evaluated) and turned into an :class:`OpCall`: per
schema argument either a literal, a tensor (shape, dtype) or a list of them. At run time the tensors come
from a :class:`~etkit.replay.pool.TensorPool` and go back to it after the call.

Unlike PARAM's et_replay this never ``eval``s trace strings, does not need the trace's PyTorch version to
match (the op is looked up by name and overload in the running PyTorch), and an op it cannot build is
reported with the reason instead of being skipped.
"""

from __future__ import annotations

import math
import re
from dataclasses import field
from typing import Any

import torch

from ..literal import LiteralError, parse_literal
from ..records import record
from .pool import TensorPool

__all__ = ["OpCall", "ArgSpec", "parse_op_call", "UnsupportedOp", "tensor_dtype", "run_op_call"]

_TENSOR_TYPE = re.compile(r"^Tensor\((?P<dtype>.*)\)$")
_LIST_TYPE = re.compile(r"^(?:GenericList|Tuple|List)\[(?P<inner>.*)\]$")

#: PyTorch ET element type names -> dtypes (c10 ScalarType names as the observer prints them).
DTYPES: dict[str, torch.dtype] = {
    "float": torch.float32, "double": torch.float64, "c10::Half": torch.float16,
    "c10::BFloat16": torch.bfloat16, "long int": torch.int64, "int": torch.int32, "short int": torch.int16,
    "signed char": torch.int8, "unsigned char": torch.uint8, "bool": torch.bool,
    "c10::complex<float>": torch.complex64, "c10::complex<double>": torch.complex128,
    "c10::Float8_e4m3fn": getattr(torch, "float8_e4m3fn", torch.uint8),
    "c10::Float8_e5m2": getattr(torch, "float8_e5m2", torch.uint8),
}


class UnsupportedOp(ValueError):
    """A node whose operator cannot be rebuilt; the message is the reason the report lists."""


@record(frozen=True)
class ArgSpec:
    """One argument: ``kind`` is "value", "tensor", "tensors", "device" or "none"."""

    kind: str
    #: literal value; (shape, dtype, storage elements or 0) for a tensor; list of ArgSpec for "tensors"
    value: Any = None


@record
class OpCall:
    """A resolved operator and its argument specs, ready to run many times."""

    name: str
    overload: Any
    args: list[ArgSpec] = field(default_factory=list)
    kwargs: dict[str, ArgSpec] = field(default_factory=dict)


def tensor_dtype(type_name: str) -> torch.dtype | None:
    """The dtype of an ET type string such as ``Tensor(float)``; ``None`` if it is not a typed tensor."""
    m = _TENSOR_TYPE.match(type_name.strip())
    if not m:
        return None
    return DTYPES.get(m.group("dtype"))


def _split_types(inner: str) -> list[str]:
    """Split ``Tensor(float),Tensor(long int)`` at top-level commas (types nest brackets, never commas)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in inner:
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if current:
        parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _literal(text: str, what: str) -> Any:
    try:
        return parse_literal(text, what=f"IOInfo {what}")
    except LiteralError:
        raise UnsupportedOp(f"unparseable IOInfo {what}") from None


def _arg_spec(value: Any, shape: Any, type_name: str) -> ArgSpec:
    type_name = type_name.strip()
    if type_name.startswith("Tensor"):
        if "nullptr" in type_name or value == "<None>":
            return ArgSpec("none")
        dtype = tensor_dtype(type_name)
        if dtype is None:
            raise UnsupportedOp(f"tensor type {type_name}")
        if not isinstance(shape, list) or not all(isinstance(s, int) for s in shape):
            raise UnsupportedOp(f"tensor shape {shape!r}")
        return ArgSpec("tensor", (tuple(shape), dtype, 0))
    m = _LIST_TYPE.match(type_name)
    if m:
        inner = _split_types(m.group("inner"))
        if any(t.startswith("Tensor") or t.startswith("GenericList") for t in inner):
            values = value if isinstance(value, list) else []
            shapes = shape if isinstance(shape, list) else []
            if len(inner) != len(values) or len(shapes) != len(values):
                raise UnsupportedOp(f"truncated list argument {type_name[:40]}")
            return ArgSpec("tensors", [_arg_spec(v, s, t) for v, s, t in zip(values, shapes, inner)])
        return ArgSpec("value", value)
    if type_name == "None" or value == "<None>":
        return ArgSpec("none")
    if type_name == "Device":
        return ArgSpec("device")
    if type_name == "Generator":
        return ArgSpec("none")
    if type_name in ("Int", "Double", "Bool", "String", "Float", "SymInt", "Scalar", "Layout",
                     "ScalarType", "MemoryFormat", "Complex"):
        return ArgSpec("value", value)
    raise UnsupportedOp(f"argument of type {type_name}")


def _resolve(name: str, op_schema: str) -> tuple[Any, Any]:
    """The live ``OpOverload`` for ``aten::name[.overload]`` and the schema to map arguments with."""
    namespace, _, op_name = name.partition("::")
    if namespace != "aten" or not op_name:
        raise UnsupportedOp("not an ATen operator")
    packet = getattr(torch.ops.aten, op_name, None)
    if packet is None:
        raise UnsupportedOp(f"no ATen operator {name} in this PyTorch")
    overload_name = "default"
    head = op_schema.split("(", 1)[0] if op_schema else ""
    if "." in head:
        overload_name = head.split(".", 1)[1]
    overload = getattr(packet, overload_name, None)
    if overload is None:
        raise UnsupportedOp(f"no overload {overload_name} of {name} in this PyTorch")
    schema = overload._schema
    if op_schema:
        try:
            schema = torch._C.parse_schema(op_schema)
        except RuntimeError:
            pass
    return overload, schema


def parse_op_call(name: str, op_schema: str, values: str, shapes: str, types: str) -> OpCall:
    """Build the :class:`OpCall` of one node from its name, schema and IOInfo strings.

    Raises :class:`UnsupportedOp` with a short reason when the node cannot be rebuilt.
    """
    overload, schema = _resolve(name, op_schema)
    vals = _literal(values, "values") if values else []
    shps = _literal(shapes, "shapes") if shapes else []
    typs = _literal(types, "types") if types else []
    if not (isinstance(vals, list) and isinstance(shps, list) and isinstance(typs, list)):
        raise UnsupportedOp("IOInfo is not three lists")
    if not (len(vals) == len(shps) == len(typs)):
        raise UnsupportedOp("IOInfo lists differ in length")
    arguments = list(schema.arguments)
    if len(vals) > len(arguments):
        raise UnsupportedOp("more recorded inputs than schema arguments")
    call = OpCall(name, overload)
    for argument, value, shape, type_name in zip(arguments, vals, shps, typs):
        if not isinstance(type_name, str):
            raise UnsupportedOp("non-string type entry")
        spec = _arg_spec(value, shape, type_name)
        if argument.kwarg_only:
            call.kwargs[argument.name] = spec
        else:
            call.args.append(spec)
    if name.startswith("aten::as_strided"):
        _widen_strided_base(call)
    return call


def _widen_strided_base(call: OpCall) -> None:
    """``as_strided(self, size, stride, offset)`` reads ``self``'s *storage*, which a view in the original
    program shared with a larger tensor; give the stand-in a storage that holds every element addressed."""
    if len(call.args) < 3 or call.args[0].kind != "tensor":
        return
    size, stride = call.args[1].value, call.args[2].value
    offset = call.args[3].value if len(call.args) > 3 and call.args[3].kind == "value" else 0
    if not (isinstance(size, list) and isinstance(stride, list) and len(size) == len(stride)):
        return
    if not all(isinstance(v, int) for v in (*size, *stride)) or not isinstance(offset, int):
        return
    if any(s == 0 for s in size):
        return
    needed = (offset or 0) + sum((s - 1) * st for s, st in zip(size, stride)) + 1
    shape, dtype, _ = call.args[0].value
    call.args[0] = ArgSpec("tensor", (shape, dtype, needed))


def _materialize(spec: ArgSpec, pool: TensorPool, lent: list[tuple[torch.Tensor, tuple]]) -> Any:
    if spec.kind == "tensor":
        shape, dtype, storage = spec.value
        numel = math.prod(shape)
        if storage > numel:  # a view into a larger storage: lend the storage, pass the view
            flat = pool.take((storage,), dtype)
            lent.append((flat, (storage,)))
            return flat[:numel].view(shape)
        tensor = pool.take(shape, dtype)
        lent.append((tensor, shape))
        return tensor
    if spec.kind == "tensors":
        return [_materialize(s, pool, lent) for s in spec.value]
    if spec.kind == "device":
        return pool.device
    if spec.kind == "none":
        return None
    return spec.value


def run_op_call(call: OpCall, pool: TensorPool) -> Any:
    """Run ``call`` once with pooled tensors and return its result; the tensors go back to the pool after
    (also when the op raises), so a result that aliases an input must not be kept."""
    lent: list[tuple[torch.Tensor, tuple]] = []
    try:
        args = [_materialize(s, pool, lent) for s in call.args]
        kwargs = {k: _materialize(s, pool, lent) for k, s in call.kwargs.items()}
        return call.overload(*args, **kwargs)
    finally:
        for tensor, shape in lent:
            pool.give_back(tensor, shape)
