"""Reading big trace JSON documents without holding every parsed object at once.

Host execution traces and Kineto traces are one JSON object with one huge array (``nodes`` or
``traceEvents``). Parsing the whole document turns ~1 KB of text per element into ~6 KB of Python
objects. :func:`iter_array_chunks` instead hands out the array in chunks of a few thousand parsed
elements, so callers compact each chunk and drop it before the next one is parsed.

The chunking relies on a property every JSON writer shares: a raw newline can never occur inside a
JSON string, so ``}`` ``,`` <newline + the elements' indentation> ``{`` can only sit *between* objects.
Such a boundary may still lie inside a nested array of an element; then the chunk does not parse on its
own, and the reader falls back to parsing the whole document (same result, more memory).

A large plain file is mapped (``mmap``), not read: its pages come from the page cache as the chunks are
cut, and those already handed out are let go (``MADV_DONTNEED``), so the document's text never sits in
the process's memory beside the records made from it (on a 1M-node host trace: 750 MB less at the peak,
and the page faults of reading it into fresh memory saved).
"""

from __future__ import annotations

import itertools
import mmap
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, TypeVar

import orjson

from ..errors import EtkitError
from ..fileio import read_bytes_maybe_gzip
from ..records import record

__all__ = ["JsonArrayDocument", "read_array_document", "check_readable", "convert_element", "CHUNK_ELEMENTS"]

T = TypeVar("T")
#: A reader of elements straight from a document's text (:meth:`JsonArrayDocument.converted`'s ``scan``).
Scan = Callable[[Any, int, int], tuple[list[T], int, int]]

#: Elements parsed at a time. Small on purpose: a chunk of 64 host nodes (~400 KB of Python objects) is
#: still in the CPU cache when the caller compacts it; 2048 nodes (~12 MB) are not, and reading a
#: host trace took 1.4x longer (measured on a 100k-node trace).
CHUNK_ELEMENTS = 64


@record
class JsonArrayDocument:
    """A JSON object whose ``key`` array is read lazily: ``header`` holds every other top-level key."""

    path: str
    key: str
    header: dict[str, Any]
    _data: bytes | mmap.mmap | None
    _body: tuple[int, int] | None
    _parsed: list[Any] | None
    found: bool = True  # whether the document has the ``key`` array at all

    def chunks(self, size: int = CHUNK_ELEMENTS, *,
               fast: Callable[[bytes], list[Any] | None] | None = None) -> Iterator[list[Any]]:
        """The array's elements, ``size`` at a time, in document order (single pass; frees as it goes);
        ``fast`` as in :meth:`converted`."""
        return self.converted(_same, fast=fast, size=size)

    def whole(self, read: Callable[[bytes | mmap.mmap, int, int], T | None]) -> T | None:
        """``read(text, start, stop)``: the array read at once from the document's text (its elements are
        ``text[start:stop]``), for a reader that takes the whole array in one pass; the document is then let
        go (:meth:`chunks` gives nothing more). ``None``, the document untouched, when ``read`` declines (returns
        ``None``) or the document was parsed whole."""
        if self._data is None or self._body is None:
            return None
        result = read(self._data, *self._body)
        if result is not None:
            data, self._data = self._data, None
            if isinstance(data, mmap.mmap):
                data.close()
        return result

    def converted(self, convert: Callable[[Any], T], *, fast: Callable[[bytes], list[T] | None] | None = None,
                  size: int = CHUNK_ELEMENTS, scan: Scan[T] | None = None) -> Iterator[list[T]]:
        """``convert`` of every element of the array, ``size`` elements at a time, in document order.

        ``fast`` may do a chunk's whole work at once: given the chunk's JSON text (an array of its
        elements), it returns their conversions, or ``None`` when it cannot; that chunk is then parsed by
        orjson and converted element by element. It must give what ``convert`` gives, or ``None``.

        ``scan`` may read the elements straight from the document's text, before any chunk is cut: called
        as ``scan(text, pos, stop)`` (``stop``: the offset of the document's last ``]``), it returns the
        conversions of the elements from ``pos`` on that it read, the offset after them and a status: 0 the
        array is read, 1 call again from there, 2 the chunks take the rest from there. It must give what
        ``convert`` gives (see :func:`convert_element` for an element it leaves to the chunk path)."""
        if self._parsed is not None:
            items, self._parsed = self._parsed, None
            for i in range(0, len(items), size):
                yield _apply(convert, items[i:i + size])
            return
        data, self._data = self._data, None
        if data is None or self._body is None:
            return
        try:
            yield from self._converted(data, convert, fast, size, scan)
        finally:
            if isinstance(data, mmap.mmap):
                data.close()

    def _converted(self, data: bytes | mmap.mmap, convert: Callable[[Any], T],
                   fast: Callable[[bytes], list[T] | None] | None, size: int,
                   scan: Scan[T] | None) -> Iterator[list[T]]:
        """:meth:`converted` of the document's text ``data``."""
        assert self._body is not None
        start, stop = self._body
        first, done, released = start, 0, 0  # (the chunks start after what scan read)
        while scan is not None:
            items, first, status = scan(data, first, stop)
            done += len(items)
            released = _release(data, released, first)
            if items:
                yield items
            if status == 0:
                return
            if status == 2:
                break
        points = _split_points(data, first, stop)
        _release(data, 0, len(data))  # (the split read every page: the chunks map theirs again)
        released = 0
        cuts = [first] + points[size - 1::size] + [stop]
        for a, b in zip(cuts, cuts[1:]):
            piece = data[a:b].strip().rstrip(b",")
            if not piece.strip():
                continue
            got = _parse_piece(b"[" + piece + b"]", fast)
            if got is None and b == stop and (last := _last_elements(data, start, a, stop)) is not None:
                got = _parse_piece(last, fast)  # (the array ends before the document's last "]")
            if got is None:
                break
            items, ready = got
            done += len(items)
            released = _release(data, released, b)
            for i in range(0, len(items), size):  # one piece when the writer put no newlines between elements
                yield items[i:i + size] if ready else _apply(convert, items[i:i + size])
        else:
            return
        # A boundary fell inside an element: a chunk that parses is always made of whole elements, so
        # parse the whole document and hand out what was not handed out yet.
        items = _loads(data[:] if isinstance(data, mmap.mmap) else data, self.path).get(self.key) or []
        del data
        for i in range(done, len(items), size):
            yield _apply(convert, items[i:i + size])


#: Plain files from this size on are mapped rather than read. Reading costs a copy and a page fault per 4 KiB
#: of fresh memory: ``convert pytorch`` of param's 12 MB resnet host trace faulted 11,965 pages read, 6,764
#: mapped, and took 15 ms (8 %) less CPU mapped; below 1 MiB either costs next to nothing.
MAP_BYTES = 1 << 20


def _mapped(path: str | os.PathLike[str]) -> mmap.mmap | None:
    """A read-only mapping of ``path`` when it is a plain (not gzip) regular file of at least
    :data:`MAP_BYTES`; ``None`` otherwise (then it is read as a whole)."""
    try:
        info = os.stat(path)  # before opening: opening a FIFO to look at it would consume its writer
        if not stat.S_ISREG(info.st_mode) or info.st_size < MAP_BYTES:
            return None
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode) or f.read(2) == b"\x1f\x8b":
                return None
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None  # (read as a whole, which reports what is wrong)


def _release(data: bytes | mmap.mmap, done: int, upto: int) -> int:
    """Let go of the mapped pages of ``data`` from ``done`` up to the page that holds ``upto`` (they are
    mapped again from the page cache if read again); returns how far pages are let go. Bytes: nothing."""
    end = upto - upto % mmap.PAGESIZE
    if isinstance(data, mmap.mmap) and end > done and hasattr(data, "madvise"):
        data.madvise(mmap.MADV_DONTNEED, done, end - done)
        return end
    return done


def convert_element(text: bytes, convert: Callable[[Any], T],
                    fast: Callable[[bytes], list[T] | None] | None = None) -> T | None:
    """One element, given as its JSON text, read as the chunks are (``fast`` on it as a chunk of one, else
    ``convert`` of it parsed); ``None`` when it does not parse as one element."""
    got = _parse_piece(b"[" + text + b"]", fast)
    if got is None or len(got[0]) != 1:
        return None
    items, ready = got
    return items[0] if ready else convert(items[0])


def _parse_piece(text: bytes, fast: Callable[[bytes], list[Any] | None] | None) -> tuple[list[Any], bool] | None:
    """(``fast`` of a chunk's JSON text, True), else (its elements parsed by orjson, False); ``None`` when
    the text does not parse."""
    if fast is not None:
        results = fast(text)
        if results is not None:
            return results, True
    try:
        return orjson.loads(text), False
    except orjson.JSONDecodeError:
        return None


def _last_elements(data: bytes | mmap.mmap, start: int, a: int, stop: int) -> bytes | None:
    """The array's last elements (a JSON array's text) when its last chunk ``data[a:stop]`` does not parse
    because the array ends inside it: another array follows it in the document (Kineto's ``"INFO": [...]``
    logs), so ``stop``, the document's last ``]``, lies beyond its end. ``None`` when that end is not found
    or the document around the array is not valid JSON (the whole document is then parsed, as for any
    chunk that does not parse, and that reports the fault)."""
    # the array's own "]" follows its last object's "}": the first such "]" before which the chunk parses
    for m in itertools.islice(_object_end().finditer(data, a, stop), _MAX_END_TRIES):
        end = m.end() - 1
        text = b"[" + data[a:end].strip().rstrip(b",") + b"]"
        try:
            orjson.loads(text)
        except orjson.JSONDecodeError:
            continue
        try:
            rest = orjson.loads(data[:start - 1] + b"null" + data[end + 1:])
        except orjson.JSONDecodeError:
            return None
        return text if isinstance(rest, dict) else None
    return None


@cache
def _object_end() -> re.Pattern[bytes]:
    return re.compile(rb"\}\s*\]")


_MAX_END_TRIES = 64


def _same(item: Any) -> Any:
    return item


def _apply(convert: Callable[[Any], T], items: list[Any]) -> list[T]:
    return items if convert is _same else [convert(item) for item in items]


def _split_points(data: bytes | mmap.mmap, start: int, stop: int) -> list[int]:
    """Offsets just after the ``,`` of every ``},<newline><indent>{`` between ``start`` and ``stop``.

    Pretty-printers indent every element of the array alike, so requiring the first element's
    indentation skips most newlines inside an element (e.g. ``attrs`` lists spread over lines).
    """
    first = start
    while first < stop and data[first] in b" \t\r\n":
        first += 1
    newline = data.rfind(b"\n", start, first)
    indent = data[newline + 1:first] if newline >= 0 else None
    pattern = _separator() if indent is None else re.compile(rb"\}[ \t\r]*,[ \t\r]*\n" + re.escape(indent) + rb"(?=\{)")
    return [m.end() for m in pattern.finditer(data, start, stop)]


@cache
def _separator() -> re.Pattern[bytes]:
    return re.compile(rb"\}[ \t\r]*,[ \t\r]*\n(?=\s*\{)")


def _loads(data: bytes, path: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EtkitError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise EtkitError(f"{path}: expected a JSON object at the top level")
    return doc


def _unreadable(name: str, exc: OSError) -> EtkitError:
    return EtkitError(f"{name}: cannot read ({exc.strerror or exc})")


def check_readable(path: str | os.PathLike[str]) -> None:
    """The error :func:`read_array_document` would give for a file it cannot open, without reading it (a FIFO
    or ``<(...)`` is left alone: opening it would take its bytes from the reader)."""
    if os.path.exists(path) and not os.path.isfile(path):
        return
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise _unreadable(str(path), exc) from None


def read_array_document(path: str | os.PathLike[str], key: str, *, data: bytes | None = None) -> JsonArrayDocument:
    """Open the JSON object in ``path`` (gzip sniffed) for chunked reading of its ``key`` array.

    A gzip file may decompress only so far (:func:`etkit.fileio.max_decompressed_bytes`: 64 MiB, or 100
    times its size): a small "gzip bomb" is refused after a fraction of a second, not parsed."""
    name = str(path)
    try:
        raw = data if data is not None else (_mapped(path) or read_bytes_maybe_gzip(path))
    except OSError as exc:
        raise _unreadable(name, exc) from None
    except EOFError:
        raise EtkitError(f"{name}: truncated gzip file") from None
    except zlib.error as exc:
        raise EtkitError(f"{name}: corrupt gzip data ({exc})") from None
    m = re.search(rb'(?<!\\)"' + re.escape(key.encode()) + rb'"\s*:\s*\[', raw)
    if m is not None:
        close = raw.rfind(b"]")
        if close > m.end():
            try:
                header = orjson.loads(raw[:m.start()] + b'"' + key.encode() + b'": null' + raw[close + 1:])
            except orjson.JSONDecodeError:
                header = None
            if isinstance(header, dict):
                header.pop(key, None)
                return JsonArrayDocument(name, key, header, raw, (m.end(), close), None)
    if isinstance(raw, mmap.mmap):
        mapped, raw = raw, raw[:]
        mapped.close()
    doc = _loads(raw, name)
    items = doc.pop(key, None)
    if items is not None and not isinstance(items, list):
        raise EtkitError(f"{name}: {key!r} is not a JSON array")
    return JsonArrayDocument(name, key, doc, None, None, items or [], found=items is not None)


