"""A safe parser for the Python-literal strings found in traces (never ``eval``); every layer uses this one.

It sits at the bottom of the package (it needs only :mod:`etkit.errors`) so that the model, the
PyTorch converter and replay all read trace strings with the same bounded grammar.

Host traces and linked traces carry some values as Python ``str()`` renderings: ``in_split_size``
attributes (``"[8, 11]"``), IOInfo strings (``"[[19, 20, 0, 8, 4, 'cpu'], 'sum']"``), the
``process_group:init`` payload wrapped in a list (``'[\\'[{"pg_name": "0"}]\\']'``). Trace contents
are untrusted input, so this module accepts only the literal grammar those renderings use: lists,
tuples, dicts, strings, ints, floats, ``True``/``False``/``None`` (and JSON's ``true``/``false``/``null``),
with limits on nesting depth, length and integer digits. Anything else raises :class:`LiteralError` (and
nothing else: no input makes it raise ``TypeError``, ``ValueError`` or ``RecursionError``), whose one-line
message starts with the caller's ``what`` (the file, node and attribute).
"""

from __future__ import annotations

import re
from typing import Any

from .errors import EtkitError

__all__ = ["LiteralError", "parse_literal", "MAX_DEPTH", "MAX_LENGTH", "MAX_DIGITS"]

MAX_DEPTH = 64
MAX_LENGTH = 64 << 20
#: Longest integer accepted (digits): wider than any 128-bit value, far below Python's own 4,300-digit limit.
MAX_DIGITS = 40

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<open>[\[\(\{])
    | (?P<close>[\]\)\}])
    | (?P<comma>,)
    | (?P<colon>:)
    | (?P<str>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
    | (?P<num>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan)
    | (?P<word>True|False|None|true|false|null)
    )""", re.VERBOSE)

_WORDS = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}
_CLOSERS = {"[": "]", "(": ")", "{": "}"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0", "/": "/",
            "b": "\b", "f": "\f"}
#: A JSON-style surrogate pair (``\\ud83d\\ude00``) is one character; any other escape is one of these.
_ESCAPE = re.compile(r"\\(u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|U[0-9a-fA-F]{8}|u[0-9a-fA-F]{4}|"
                     r"x[0-9a-fA-F]{2}|.)")


class LiteralError(EtkitError, ValueError):
    """A string that is not a plain Python/JSON literal (or exceeds the size limits)."""


def _unescape(body: str, what: str, at: int) -> str:
    def sub(m: re.Match[str]) -> str:
        code = m.group(1)
        if len(code) == 11:  # a surrogate pair
            high, low = int(code[1:5], 16), int(code[7:], 16)
            return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
        if code[0] in "uUx" and len(code) > 1:
            point = int(code[1:], 16)
            if point > 0x10FFFF or 0xD800 <= point <= 0xDFFF:
                raise LiteralError(f"{what}: escape \\{code} at character {at} is not a Unicode character")
            return chr(point)
        return _ESCAPES.get(code, "\\" + code)

    return _ESCAPE.sub(sub, body) if "\\" in body else body


def _number(text: str, what: str, at: int) -> int | float:
    digits = text.lstrip("+-")
    if digits.isdigit():
        if len(digits) > MAX_DIGITS:
            raise LiteralError(f"{what}: integer of {len(digits)} digits at character {at} (at most {MAX_DIGITS})")
        return int(text)
    return float(text)


def parse_literal(text: str, *, what: str = "value") -> Any:
    """The Python value written in ``text``; :class:`LiteralError` naming ``what`` if it is not a literal."""
    if len(text) > MAX_LENGTH:
        raise LiteralError(f"{what}: literal longer than {MAX_LENGTH} characters")
    frames: list[_Frame] = []
    result: Any = _NOTHING
    pos = 0
    while True:
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos:].strip():
                raise LiteralError(f"{what}: not a literal at character {pos}: {text[pos:pos + 20]!r}")
            break
        pos = m.end()
        kind = m.lastgroup or ""
        token = m.group(kind)
        at = m.start(kind)
        top = frames[-1] if frames else None
        if kind == "open":
            if top is not None and not top.wants_value():
                raise LiteralError(f"{what}: unexpected {token!r} at character {at}")
            if len(frames) >= MAX_DEPTH:
                raise LiteralError(f"{what}: nesting deeper than {MAX_DEPTH}")
            if top is None and result is not _NOTHING:
                raise LiteralError(f"{what}: more than one value")
            frames.append(_Frame(token))
            continue
        if kind == "close":
            if top is None or _CLOSERS[top.opener] != token or top.state == "colon" or top.key is not _NOTHING:
                raise LiteralError(f"{what}: unexpected {token!r} at character {at}")
            frames.pop()
            value: Any = tuple(top.items) if top.opener == "(" else (top.mapping if top.opener == "{" else top.items)
            top = frames[-1] if frames else None
        elif kind == "comma":
            if top is None or top.state != "sep":
                raise LiteralError(f"{what}: unexpected ',' at character {at}")
            top.state = "item"
            continue
        elif kind == "colon":
            if top is None or top.state != "colon":
                raise LiteralError(f"{what}: unexpected ':' at character {at}")
            top.state = "value"
            continue
        elif kind == "str":
            value = _unescape(token[1:-1], what, at)
        elif kind == "num":
            value = _number(token, what, at)
        else:
            value = _WORDS[token]
        if top is None:
            if result is not _NOTHING:
                raise LiteralError(f"{what}: more than one value")
            result = value
            continue
        if not top.wants_value():
            raise LiteralError(f"{what}: missing ',' before character {at}")
        top.add(value, what, at)
    if frames:
        raise LiteralError(f"{what}: unclosed {frames[-1].opener!r}")
    if result is _NOTHING:
        raise LiteralError(f"{what}: empty literal")
    return result


class _Frame:
    """One open container while parsing; ``state`` says which token it accepts next."""

    __slots__ = ("opener", "items", "mapping", "key", "state")

    def __init__(self, opener: str) -> None:
        self.opener = opener
        self.items: list[Any] = []
        self.mapping: dict[Any, Any] = {}
        self.key: Any = _NOTHING
        self.state = "item"  # item -> (dict: colon -> value) -> sep -> item ...

    def wants_value(self) -> bool:
        return self.state in ("item", "value")

    def add(self, value: Any, what: str, at: int) -> None:
        if self.opener != "{":
            self.items.append(value)
            self.state = "sep"
        elif self.state == "item":
            try:
                hash(value)
            except TypeError:  # a list or dict, also inside a tuple
                raise LiteralError(f"{what}: unhashable dict key at character {at}") from None
            self.key = value
            self.state = "colon"
        else:
            self.mapping[self.key] = value
            self.key = _NOTHING
            self.state = "sep"


class _Nothing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<nothing>"


_NOTHING: Any = _Nothing()
