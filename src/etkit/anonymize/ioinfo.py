"""Rewriting a node's IOInfo (``inputs``/``outputs``: the ``str()`` of PyTorch ET lists) for anonymisation.

PyTorch's ET writes, per operator, ``values`` (one entry per argument: a tensor as
``[tensor_id, storage_id, offset, numel, elem_bytes, 'device']``, or the scalar, string, list...),
``shapes`` and ``types``. :class:`IoRewriter` keeps what the policy keeps: tensors with their ids and
storage ids renumbered per rank in order of first use (so aliasing and reuse stay visible) and every
other argument replaced by ``None`` (strings and scalars go); shapes as they are, bucketed (each
dimension rounded up to a power of two) or dropped; type names only when asked.

The texts are tokenised with one regular expression, never evaluated; anything the tokenizer does not
recognise as a number, tensor or bracket becomes ``None``, so no text of the input can pass through.
Results are cached per input text (operators repeat their argument lists).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import orjson

__all__ = ["IoRewriter", "quoted_strings", "parse_shapes", "bucket_dim"]

# a tensor, a quoted string (either quote), or any other run that is not a bracket, comma or space
_VALUE_TOKEN = re.compile(
    r"""\[(\d+),\s*(\d+),\s*(-?\d+),\s*(\d+),\s*(\d+),\s*'([^'\\]*)'\]"""
    r"""|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\[\](),\s]+""")
_QUOTED = re.compile(r"""'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)\"""")
_SHAPE_TEXT = re.compile(r"^[\[\]0-9,\s-]*$")
_DIGITS = re.compile(r"\d+")
#: The devices a renumbered tensor may name (everything else is "dev"): etkit's words, not the input's.
DEVICES = ("cpu", "cuda", "dev")


def bucket_dim(value: int) -> int:
    """``value`` rounded up to a power of two (0 and 1 stay)."""
    return value if value <= 1 else 1 << (value - 1).bit_length()


def _device(text: str) -> str:
    if text == "cpu" or text.startswith("cpu:"):
        return "cpu"
    if text.startswith(("cuda", "hip", "gpu")):
        return "cuda"
    return "dev"


def quoted_strings(text: str, depth: int = 2) -> list[str]:
    """The contents of the quoted strings of an IOInfo text (argument strings, type names, devices), and
    of the strings quoted inside those (a ``process_group:init`` node's JSON: group descriptions, backends)."""
    found = [a or b for a, b in _QUOTED.findall(text)]
    if depth > 1:
        found += [inner for s in found if "'" in s or '"' in s for inner in quoted_strings(s, depth - 1)]
    return found


def parse_shapes(text: str) -> list | None:
    """The shapes list of an IOInfo ``shapes`` text (nested lists of ints), or None if it is not one."""
    if not text or not _SHAPE_TEXT.match(text):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, list) else None


@dataclass
class IoRewriter:
    """One rank's IOInfo rewriting (tensor numbering is per rank: ids are per process)."""

    tensors: str = "renumber"  # renumber | drop
    shapes: str = "keep"  # keep | bucket | drop
    types: str = "drop"  # keep | drop
    tensor_ids: dict[int, int] = field(default_factory=dict)
    storage_ids: dict[int, int] = field(default_factory=dict)
    _values: dict[str, str] = field(default_factory=dict)
    _shapes: dict[str, str] = field(default_factory=dict)

    def values(self, text: str) -> str:
        if self.tensors == "drop" or not text:
            return ""
        out = self._values.get(text)
        if out is None:
            out = _VALUE_TOKEN.sub(self._token, text)
            if len(self._values) < 1 << 17:
                self._values[text] = out
        return out

    def _token(self, m: re.Match[str]) -> str:
        if m.group(1) is None:
            return "None"
        tid, sid = int(m.group(1)), int(m.group(2))
        new_tid = self.tensor_ids.setdefault(tid, len(self.tensor_ids) + 1)
        new_sid = self.storage_ids.setdefault(sid, len(self.storage_ids) + 1)
        return f"[{new_tid}, {new_sid}, {m.group(3)}, {m.group(4)}, {m.group(5)}, '{_device(m.group(6))}']"

    def shapes_text(self, text: str) -> str:
        if self.shapes == "drop" or not text or not _SHAPE_TEXT.match(text):
            return ""  # a shapes text with anything but numbers is not kept
        if self.shapes == "keep":
            return text
        out = self._shapes.get(text)
        if out is None:
            out = self._shapes[text] = _DIGITS.sub(lambda m: str(bucket_dim(int(m.group()))), text)
        return out

    def types_text(self, text: str) -> str:
        return text if self.types == "keep" else ""
