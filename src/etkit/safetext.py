"""Text from a trace shown to a person: displayed, never obeyed.

Trace contents are untrusted: a node name can hold ESC sequences (set the window title, clear the screen),
a carriage return or bidi overrides (reorder what a line seems to say), or characters that XML forbids.
:func:`printable` is applied to every text a verb prints to a terminal; :func:`xml_text` to every trace
string written into SVG or GraphML. Both are leaf helpers (no etkit imports).
"""

from __future__ import annotations

import functools
import re

__all__ = ["printable", "xml_text"]

#: Characters a terminal acts on instead of showing: C0 controls but tab and newline, DEL and C1 controls,
#: the bidi marks, embeddings, overrides and isolates, line/paragraph separators, the BOM, and lone
#: surrogates (which cannot even be encoded to UTF-8).
_UNSAFE = ("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff"
           "\ud800-\udfff]")
#: Characters XML 1.0 does not allow in a document (plus lone surrogates).
_NOT_XML = "[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]"
#: Every character of the two sets is one ``str.isprintable`` refuses (controls, formats, separators,
#: surrogates, non-characters): a printable text has none, and needs no pattern.


@functools.cache
def _pattern(chars: str) -> re.Pattern[str]:
    """The compiled character set (compiled on first need: the surrogate range alone costs re's compiler
    several million instructions, 33M for the three, which most commands never need)."""
    return re.compile(chars)


def _escaped(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, newlines: bool = True) -> str:
    """``text`` with every character a terminal would obey rather than show written as its escape
    (``\\x1b``, ``\\r``-as-``\\x0d``, ``\\u202e``); tabs stay, newlines stay unless ``newlines=False`` (for a
    value that must stay on one line, such as an error message)."""
    if text.isprintable():
        return text
    pattern = _pattern(_UNSAFE if newlines else _UNSAFE[:-1] + "\n]")
    return pattern.sub(_escaped, text) if pattern.search(text) else text


def xml_text(text: str) -> str:
    """``text`` without the characters XML 1.0 forbids (control characters other than tab, newline and
    CR; lone surrogates), each written as its escape (``\\x1b``), so that it can be XML-escaped into a
    valid document. Escape ``<``, ``&`` and quotes afterwards as usual."""
    if text.isprintable():
        return text
    pattern = _pattern(_NOT_XML)
    return pattern.sub(_escaped, text) if pattern.search(text) else text
