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
from dataclasses import field

import numpy as np
import orjson

from ..format.encode import copy_spans
from ..format.parts import span_table
from ..format.wire import WireFault, int64s
from ..records import record
from . import kernel

__all__ = ["IoRewriter", "quoted_strings", "parse_shapes", "bucket_dim", "starts_of"]

# a tensor, a quoted string (either quote), or any other run that is not a bracket, comma or space
_VALUE_TOKEN = re.compile(
    r"""\[(\d+),\s*(\d+),\s*(-?\d+),\s*(\d+),\s*(\d+),\s*'([^'\\]*)'\]"""
    r"""|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\[\](),\s]+""")
_QUOTED = re.compile(r"""'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)\"""")
# the same on bytes, for many texts joined by \x1f (segments by \x1e): no token crosses those
_TENSOR_B = re.compile(rb"\[(\d+),\s*(\d+),\s*(-?\d+),\s*(\d+),\s*(\d+),\s*'([^'\\\x1e\x1f]*)'\]")
_OTHER_B = re.compile(rb"""'(?:[^'\\\x1e\x1f]|\\.)*'|"(?:[^"\\\x1e\x1f]|\\.)*"|[^\[\](),\s\x1e\x1f]+""")
#: A tensor as PyTorch writes it (one space after each comma): its ids, the three numbers between and the device.
#: Where every tensor of a text is written so, the split by this is the split by _TENSOR_B (checked: no
#: tensor of any spacing is left between).
_CANONICAL_TENSOR_B = re.compile(rb"\[(\d+), (\d+), (-?\d+, \d+, \d+), '([^'\\\x1e\x1f]*)'\]")
_QUOTED_B = re.compile(rb"""'((?:[^'\\\x1e\x1f]|\\.)*)'|"((?:[^"\\\x1e\x1f]|\\.)*)\"""")
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


def _first_use_numbers(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """1, 2, ... for each distinct key (digits, as written) in order of first use (the renumbering of
    :func:`_renumbered`, vectorised), and how many distinct keys there are. Keys without leading zeros are
    compared as numbers (the same keys, cheaper to sort)."""
    if keys.dtype.itemsize <= 18 and not ((np.strings.str_len(keys) > 1) & np.strings.startswith(keys, b"0")).any():
        keys = keys.astype(np.int64)
    return _first_use_ranks(keys)


def _first_use_ranks(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """1, 2, ... for each distinct value of ``keys`` in order of first use, and how many there are (integer keys
    hashed in C where :data:`etkit.anonymize.kernel.SCAN` is built)."""
    if kernel.SCAN is not None and keys.dtype == np.int64:
        numbers, count = kernel.SCAN.first_use(int64s(keys))
        return np.frombuffer(numbers, dtype=np.int64), int(count)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(1, first.size + 1)
    return rank[inverse.ravel()], int(first.size)


#: The longest tensor or storage id :func:`canonical_tensors` reads (a longer one: it declines). Ids of up
#: to 18 digits without leading zeros compare as int64 exactly as they compare as text.
_MAX_DIGITS = 18
#: How far past a device's start :func:`canonical_tensors` looks for its end (a longer device: the whole text is searched).
_DEVICE_SCAN = 32
_PAD = _DEVICE_SCAN + 8


@record(frozen=True)
class TensorSpans:
    """The canonical tensors of a text (what :data:`_CANONICAL_TENSOR_B` splits by), found with numpy: each
    tensor's span, its tensor and storage ids as numbers, where its storage id ends and its device starts
    (between them ``, offset, numel, elem_bytes, '`` as written) and where the device ends."""

    start: np.ndarray
    end: np.ndarray
    tensor_id: np.ndarray
    storage_id: np.ndarray
    storage_end: np.ndarray
    device: np.ndarray
    device_end: np.ndarray


def _is_digit(b: np.ndarray, at: np.ndarray) -> np.ndarray:
    digit: np.ndarray = b[at] - np.uint8(48) <= 9
    return digit


def _digit_runs(b: np.ndarray, at: np.ndarray, ids: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Where the run of ASCII digits that starts at each of ``at`` ends (``at`` itself: no digit there), and,
    when ``ids``, the number it writes (its first :data:`_MAX_DIGITS` digits)."""
    end = at.copy()
    value = np.zeros(at.size, dtype=np.int64)
    live = np.arange(at.size)
    width = 0
    while live.size:
        live = live[_is_digit(b, end[live])]
        if ids and width < _MAX_DIGITS:
            value[live] = value[live] * 10 + (b[end[live]] - 48)
        end[live] += 1
        width += 1
    return end, value


def _special_after(b: np.ndarray, n: int, at: np.ndarray) -> np.ndarray:
    """The first ``'``, ``\\``, \\x1e or \\x1f at or after each of ``at`` in ``b[:n]`` (n: none), what ends a
    device: the devices are short, so each is looked along for :data:`_DEVICE_SCAN` bytes, and the text is
    searched whole only for one that is longer."""
    close = np.full(at.size, -1, dtype=np.int64)
    live = np.arange(at.size)
    for j in range(_DEVICE_SCAN):
        c = b[at[live] + j]
        hit = (c == 0x27) | (c == 0x5C) | (c == 0x1E) | (c == 0x1F)
        close[live[hit]] = at[live[hit]] + j
        live = live[~hit]
        if not live.size:
            break
    if live.size:
        c = b[:n]
        special = np.flatnonzero((c == 0x27) | (c == 0x5C) | (c == 0x1E) | (c == 0x1F))
        close[live] = np.append(special, n)[np.searchsorted(special, at[live])]
    return np.minimum(close, n)


def canonical_tensors(text: bytes) -> TensorSpans | None:
    """The tensors that ``_CANONICAL_TENSOR_B.split(text)`` splits by, located with numpy instead of a Python
    object per piece; None where the arrays could differ from that split (an id longer than
    :data:`_MAX_DIGITS` digits or with a leading zero, two candidates overlapping): the caller takes the
    regular expression.

    A tensor is five runs of digits, the first right after ``[``, each run followed by ``, `` and the next
    (the third may have a minus before it), then the quoted device and ``]``. Each ``[`` before a digit is
    a candidate, read along run by run (a few passes over the candidates, none over the text but the
    search for ``[``). The split scans left to right and takes the first match at each position, so where
    matches do not overlap they are its matches. In C where :data:`etkit.anonymize.kernel.SCAN` is built."""
    if kernel.SCAN is not None:
        found = kernel.SCAN.tensors(text)
        if found is None:
            return None
        return TensorSpans(*np.frombuffer(found, dtype=np.int64).reshape(7, -1))
    n = len(text)
    b = np.frombuffer(text + bytes(_PAD), dtype=np.uint8)
    lb = np.flatnonzero(b[:n] == 0x5B)
    first = lb[_is_digit(b, lb + 1)] + 1
    end, tensor_id = _digit_runs(b, first, ids=True)
    ids = [(first, end, tensor_id)]  # the tensor id's run and value, then the storage id's, of each candidate
    for k in range(4):  # run k is followed by ", " and then run k + 1 (the third number: maybe "-" first)
        nxt = end + 2
        if k == 1:
            nxt = nxt + (b[nxt] == 0x2D)
        ok = (b[end] == 0x2C) & (b[end + 1] == 0x20) & _is_digit(b, nxt)
        ids = [(f[ok], e[ok], v[ok]) for f, e, v in ids]
        end, value = _digit_runs(b, nxt[ok], ids=k == 0)
        if k == 0:
            ids.append((nxt[ok], end, value))
    device = end + 3
    close = _special_after(b, n, device)
    ok = (b[end] == 0x2C) & (b[end + 1] == 0x20) & (b[end + 2] == 0x27) & (b[close] == 0x27) & (b[close + 1] == 0x5D)
    (f0, e0, tensor_id), (f1, e1, storage_id) = [(f[ok], e[ok], v[ok]) for f, e, v in ids]
    device, close = device[ok], close[ok]
    start, stop = f0 - 1, close + 2
    if (start[1:] < stop[:-1]).any():
        return None
    for first, last in ((f0, e0), (f1, e1)):
        if ((last - first > 1) & (b[first] == 0x30)).any() or (last - first > _MAX_DIGITS).any():
            return None
    return TensorSpans(start, stop, tensor_id, storage_id, e1, device, close)


def _quoted_texts(text: bytes) -> list[str]:
    """The contents of the quoted strings of ``text`` (:data:`_QUOTED_B`; no pass of it where no quote is in it)."""
    if b"'" not in text and b'"' not in text:
        return []
    return [(a or b).decode("utf-8", "surrogateescape") for a, b in _QUOTED_B.findall(text)]


def _other_spacing(rest: bytes) -> bool:
    """Whether ``rest`` holds a tensor :data:`_TENSOR_B` matches (one written with other spacing; every one quotes
    its device, so none where no ``'`` is in it)."""
    return b"'" in rest and _TENSOR_B.search(rest) is not None


def _cut(text: bytes, b: np.ndarray, spans: TensorSpans) -> bytes:
    """``text`` (``b``: its bytes) with each tensor of ``spans`` replaced by one byte \\x1e."""
    if kernel.SCAN is not None:
        cut: bytes = kernel.SCAN.cut(text, int64s(spans.start), int64s(spans.end))
        return cut
    m, n = int(spans.start.size), len(text)
    # the text without the tensors but their first byte, which becomes the \x1e in each one's place
    seg = np.diff(spans.start, prepend=0)
    seg[1:] -= spans.end[:-1] - spans.start[:-1]  # the bytes between a tensor and the one before it
    marked = b[_alternating(np.append(seg + 1, n - spans.end[-1] if m else n), spans.end - spans.start - 1)]
    marked[spans.start - np.cumsum(spans.end - spans.start - 1) + (spans.end - spans.start - 1)] = 0x1E
    return marked.tobytes()


def _no_tensors() -> TensorSpans:
    none = np.zeros(0, dtype=np.int64)
    return TensorSpans(none, none, none, none, none, none, none)


def _decimal(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The decimal digits of positive ``values``: how many each has, and digit ``j`` (from the right) in column j."""
    digits = np.ones(values.size, dtype=np.int64)
    bound = 10
    while values.size and bound <= values.max():
        digits += values >= bound
        bound *= 10
    columns = np.empty((values.size, int(digits.max(initial=1))), dtype=np.uint8)
    rest = values.copy()
    for j in range(columns.shape[1]):
        columns[:, j] = rest % 10 + 48
        rest //= 10
    return digits, columns


def _place(out: np.ndarray, at: np.ndarray, digits: np.ndarray, columns: np.ndarray) -> None:
    """Write each number's digits (``_decimal``) at ``out[at:at + digits]``."""
    for j in range(columns.shape[1]):
        more = digits > j
        out[at[more] + digits[more] - 1 - j] = columns[more, j]


def _short_table(b: np.ndarray, off: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """:func:`~etkit.format.parts.span_table` of short texts (devices): up to 7 bytes keyed by their bytes and
    length in one word (bytes in bits 0-55, the length in bits 60-63)."""
    if length.size and length.max() <= 7:
        key = length.astype(np.uint64) << np.uint64(60)
        for j in range(int(length.max())):
            more = length > j
            key[more] |= b[off[more] + j].astype(np.uint64) << np.uint64(8 * j)
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        texts = [b[o:o + k].tobytes().decode("utf-8") for o, k in zip(off[first[order]].tolist(), length[first[order]].tolist())]
        return rank[inverse.ravel()], texts
    return span_table(b.tobytes(), off, length)


#: The bytes that end an argument that is not quoted (what :data:`_OTHER_B`'s last branch stops at).
_DELIMITER = np.zeros(256, dtype=bool)
_DELIMITER[list(b"[](), \t\n\r\f\v\x1e\x1f")] = True
_NONE = np.frombuffer(b"None", dtype=np.uint8)


def _nones(text: bytes) -> bytes:
    """``_OTHER_B.sub(b"None", text)``: every argument that is not a bracket, comma or space ``None``. Where
    no quote is in ``text`` (the quoted branches cannot match) with numpy: each run of bytes that are not
    delimiters becomes ``None``."""
    if b"'" in text or b'"' in text:
        return _OTHER_B.sub(b"None", text)
    if kernel.SCAN is not None:
        nones: bytes = kernel.SCAN.nones(text)
        return nones
    b = np.frombuffer(text, dtype=np.uint8)
    token = ~_DELIMITER[b]
    first = token.copy()
    first[1:] &= ~token[:-1]  # where a run of argument bytes starts
    kept = b[~token | first]  # the delimiters, and the first byte of each run
    runs = first[~token | first]
    out = np.repeat(kept, np.where(runs, 4, 1))
    at = np.flatnonzero(runs) + 3 * np.arange(int(runs.sum()))
    for j in range(4):
        out[at + j] = _NONE[j]
    return out.tobytes()


def _alternating(kept: np.ndarray, dropped: np.ndarray) -> np.ndarray:
    """A mask of ``kept[0]`` True, ``dropped[0]`` False, ``kept[1]`` True, ..., ``kept[-1]`` True
    (``kept`` one longer than ``dropped``)."""
    runs = np.empty(kept.size + dropped.size, dtype=np.int64)
    runs[0::2], runs[1::2] = kept, dropped
    values = np.ones(runs.size, dtype=bool)
    values[1::2] = False
    return np.repeat(values, runs)


def _strings_add(*columns: bytes | np.ndarray) -> np.ndarray:
    """Element-wise concatenation of byte-string arrays and constants."""
    out = np.strings.add(columns[0], columns[1])
    for column in columns[2:]:
        out = np.strings.add(out, column)
    return out


def starts_of(lengths: np.ndarray, gap: int) -> np.ndarray:
    """Where each of consecutive texts of ``lengths`` starts, ``gap`` bytes apart."""
    out = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1] + gap, out=out[1:])
    return out


def _renumbered(ids: list[bytes], table: dict[bytes, int]) -> list[int]:
    """The new number of each id: its place in order of first use (``table`` holds the earlier ones)."""
    out = []
    for key in ids:
        new = table.get(key)
        if new is None:
            new = table[key] = len(table) + 1
        out.append(new)
    return out


@record
class IoRewriter:
    """One rank's IOInfo rewriting (tensor numbering is per rank: ids are per process)."""

    tensors: str = "renumber"  # renumber | drop
    shapes: str = "keep"  # keep | bucket | drop
    types: str = "drop"  # keep | drop
    tensor_ids: dict[bytes, int] = field(default_factory=dict)  # the input's id (as written) -> the new one
    storage_ids: dict[bytes, int] = field(default_factory=dict)
    #: the strings quoted in the values texts seen (argument strings, devices): for the leak search
    found: set[str] = field(default_factory=set)
    tensor_count: int = 0  # tensors (and storages) numbered by values_sides
    storage_count: int = 0
    _values: dict[str, str] = field(default_factory=dict)
    _shapes: dict[str, str] = field(default_factory=dict)
    _devices: dict = field(default_factory=dict)

    @property
    def tensors_renumbered(self) -> int:
        return len(self.tensor_ids) + self.tensor_count

    def values(self, text: str) -> str:
        """One values text rewritten (see :meth:`values_many`)."""
        if self.tensors == "drop" or not text:
            return ""
        return _VALUE_TOKEN.sub(self._token, text)

    def values_many(self, texts: list[bytes]) -> list[bytes]:
        """The values texts of many nodes, in order, rewritten: each tensor ``[id, storage, offset, numel,
        elem_bytes, 'device']`` with its ids renumbered (first use first) and its device reduced to cpu /
        cuda, every other argument ``None``; their quoted strings go to :attr:`found`.

        The texts are joined and tokenised by regular expressions in a few calls, not one per token."""
        joined = b"\x1f".join(texts)
        if self.tensors == "drop":  # nothing is kept, but the strings are searched for all the same
            self.found.update(_quoted_texts(joined))
            self.found.update(s for t in texts if b"\x1e" in t or b"\x1f" in t
                              for s in quoted_strings(t.decode("utf-8", "surrogateescape")))
            return [b""] * len(texts)
        if joined.count(b"\x1f") != max(len(texts) - 1, 0) or b"\x1e" in joined:
            return [self.values(t.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape") for t in texts]
        parts = _TENSOR_B.split(joined)
        segments = parts[0::7]
        devices = self._devices
        new_ids, new_storages = _renumbered(parts[1::7], self.tensor_ids), _renumbered(parts[2::7], self.storage_ids)
        kinds = []
        for device in parts[6::7]:
            kind = devices.get(device)  # type: ignore[call-overload]
            if kind is None:
                text = device.decode("utf-8", "surrogateescape")
                self.found.add(text)
                kind = devices[device] = _device(text).encode()  # type: ignore[index]
            kinds.append(kind)
        tensors = [b"[%d, %d, %s, %s, %s, '%s']" % t for t in
                   zip(new_ids, new_storages, parts[3::7], parts[4::7], parts[5::7], kinds)]
        rest = b"\x1e".join(segments)
        self.found.update(_quoted_texts(rest))
        others = _OTHER_B.sub(b"None", rest).split(b"\x1e")
        out: list[bytes] = [b""] * (len(others) + len(tensors))
        out[0::2] = others
        out[1::2] = tensors
        return b"".join(out).split(b"\x1f")

    def values_sides(self, inputs: tuple[bytes, np.ndarray], outputs: tuple[bytes, np.ndarray]) \
            -> list[tuple[bytes, np.ndarray, np.ndarray]]:
        """:meth:`values_many` of the inputs' values texts, then of the outputs': each side is its texts joined by
        \\x1f and their lengths. Rewritten the same, but vectorised when no text holds a separator: one
        regular-expression split of both sides, the ids renumbered with ``np.unique`` (first use first), the
        tensors written with numpy's string functions. Returns per side the rewritten texts in one byte string
        with where each starts and its length."""
        sides = [inputs, outputs]
        usual = self.tensors != "drop" and not (self.tensor_ids or self.storage_ids or self.tensor_count) and all(
            text.count(b"\x1f") == max(len(lengths) - 1, 0) and b"\x1e" not in text and b"\x00" not in text
            for text, lengths in sides)
        if not usual:
            out = []
            for text, lengths in sides:
                starts = starts_of(lengths, 1)
                new = self.values_many([text[s:s + k] for s, k in zip(starts.tolist(), lengths.tolist())])
                new_lengths = np.fromiter(map(len, new), dtype=np.int64, count=len(new))
                out.append((b"".join(new), starts_of(new_lengths, 0), new_lengths))
            return out
        joined = b"\x1f".join(text for text, lengths in sides if lengths.size)
        spans = canonical_tensors(joined)
        result = self._tensors_located(joined, spans) if spans is not None else None
        if result is None:  # what the arrays cannot hold (or other spacing): the regular expressions
            parts = _CANONICAL_TENSOR_B.split(joined)
            rest = b"\x1e".join(parts[0::5])
            if _other_spacing(rest):  # a tensor written with other spacing: the general split
                result = self._tensors_general(joined)
            else:
                result = self._tensors_canonical(parts, rest)
        cuts = np.flatnonzero(np.frombuffer(result, dtype=np.uint8) == 0x1F)
        starts = np.concatenate([[0], cuts + 1]).astype(np.int64)
        ends = np.concatenate([cuts, [len(result)]]).astype(np.int64)
        out, first = [], 0
        for _, lengths in sides:
            k = int(lengths.size)
            out.append((result, starts[first:first + k], ends[first:first + k] - starts[first:first + k]))
            first += k
        return out

    def _tensors_canonical(self, parts: list[bytes], rest: bytes) -> bytes:
        """The text split by :data:`_CANONICAL_TENSOR_B` (``parts``; ``rest``: its other segments joined by
        \\x1e) with every tensor renumbered and every other argument ``None``."""
        self.found.update(_quoted_texts(rest))
        others = _nones(rest).split(b"\x1e")
        count = len(others) - 1
        if not count:
            return others[0]
        ids, self.tensor_count = _first_use_numbers(np.array(parts[1::5], dtype=bytes))
        storages, self.storage_count = _first_use_numbers(np.array(parts[2::5], dtype=bytes))
        tensors = _strings_add(b"[", ids.astype("S"), b", ", storages.astype("S"), b", ", np.array(parts[3::5], dtype=bytes),
                               b", '", self._device_kinds(parts[4::5]), b"']")
        pieces: list[bytes] = [b""] * (2 * count + 1)
        pieces[0::2] = others
        pieces[1::2] = tensors.tolist()
        return b"".join(pieces)

    def _tensors_located(self, joined: bytes, spans: TensorSpans) -> bytes | None:
        """:meth:`_tensors_canonical` from the tensors :func:`canonical_tensors` found in ``joined``, assembled
        with numpy: the other segments with the tensors cut out (a \\x1e in each place), their arguments
        ``None`` (one regular-expression pass), then each \\x1e replaced by its tensor, written from its new
        numbers and the bytes between its storage id and device as they are. None (nothing done): a device is
        not UTF-8, or a tensor is written with other spacing (the general split)."""
        b = np.frombuffer(joined, dtype=np.uint8)
        m = int(spans.start.size)
        try:
            device_idx, device_texts = _short_table(b, spans.device, spans.device_end - spans.device)
        except (UnicodeDecodeError, WireFault):
            return None
        rest = _cut(joined, b, spans)
        if _other_spacing(rest):  # a tensor written with other spacing
            return None
        self.found.update(_quoted_texts(rest))
        self.found.update(device_texts)
        subbed = _nones(rest)
        if not m:
            return subbed
        ids, self.tensor_count = _first_use_ranks(spans.tensor_id)
        storages, self.storage_count = _first_use_ranks(spans.storage_id)
        kinds = [_device(t).encode() for t in device_texts]
        if kernel.SCAN is not None:
            written: bytes = kernel.SCAN.tensors_written(subbed, joined, ids, storages, int64s(spans.storage_end),
                                                         int64s(spans.device), int64s(device_idx), tuple(kinds))
            return written
        kind_len = np.array([len(k) for k in kinds], dtype=np.int64)[device_idx]
        id_digits, id_columns = _decimal(ids)
        sid_digits, sid_columns = _decimal(storages)
        between = spans.device - spans.storage_end  # ", offset, numel, elem_bytes, '"
        size = 1 + id_digits + 2 + sid_digits + between + kind_len + 2
        s = np.frombuffer(subbed, dtype=np.uint8)
        marks = np.flatnonzero(s == 0x1E)
        before = np.zeros(m + 1, dtype=np.int64)  # the tensors' bytes before each segment
        np.cumsum(size, out=before[1:])
        out = np.empty(s.size - m + int(before[-1]), dtype=np.uint8)
        segments = np.diff(marks, prepend=-1, append=s.size) - 1  # the bytes before, between and after the marks
        out[_alternating(segments, size)] = s[s != 0x1E]
        at = marks - np.arange(m) + before[:-1]
        out[at] = 0x5B
        _place(out, at + 1, id_digits, id_columns)
        at = at + 1 + id_digits
        out[at], out[at + 1] = 0x2C, 0x20
        _place(out, at + 2, sid_digits, sid_columns)
        at = at + 2 + sid_digits
        copy_spans(out, at, b, spans.storage_end, between)
        at = at + between
        for which, kind in enumerate(kinds):
            mine = at[device_idx == which]
            for j, byte in enumerate(kind):
                out[mine + j] = byte
        at = at + kind_len
        out[at], out[at + 1] = 0x27, 0x5D
        return out.tobytes()

    def _tensors_general(self, joined: bytes) -> bytes:
        """:meth:`_tensors_canonical` for tensors of any spacing (split by :data:`_TENSOR_B`)."""
        parts = _TENSOR_B.split(joined)
        count = (len(parts) - 1) // 7
        rest = b"\x1e".join(parts[0::7])
        self.found.update(_quoted_texts(rest))
        others = _nones(rest).split(b"\x1e")
        if not count:
            return others[0]
        ids, self.tensor_count = _first_use_numbers(np.array(parts[1::7], dtype=bytes))
        storages, self.storage_count = _first_use_numbers(np.array(parts[2::7], dtype=bytes))
        tensors = _strings_add(b"[", ids.astype("S"), b", ", storages.astype("S"), b", ", np.array(parts[3::7], dtype=bytes),
                               b", ", np.array(parts[4::7], dtype=bytes), b", ", np.array(parts[5::7], dtype=bytes),
                               b", '", self._device_kinds(parts[6::7]), b"']")
        pieces: list[bytes] = [b""] * (len(others) + count)
        pieces[0::2] = others
        pieces[1::2] = tensors.tolist()
        return b"".join(pieces)

    def _device_kinds(self, devices: list[bytes]) -> np.ndarray:
        """cpu / cuda / dev for each tensor's device (each distinct device looked at once; it joins :attr:`found`)."""
        distinct, which = np.unique(np.array(devices, dtype=bytes), return_inverse=True)
        kinds = []
        for device in distinct.tolist():
            text = device.decode("utf-8", "surrogateescape")
            self.found.add(text)
            kinds.append(_device(text).encode())
        return np.array(kinds, dtype=bytes)[which.ravel()]

    def _token(self, m: re.Match[str]) -> str:
        tid, sid, offset, numel, size, device = m.groups()
        if tid is None:
            text = m.group()
            if text[0] in "'\"":
                self.found.add(text[1:-1])
            return "None"
        ids, storages = self.tensor_ids, self.storage_ids
        new_tid = ids.setdefault(tid.encode(), len(ids) + 1)
        new_sid = storages.setdefault(sid.encode(), len(storages) + 1)
        self.found.add(device)
        return f"[{new_tid}, {new_sid}, {offset}, {numel}, {size}, '{_device(device)}']"

    def shapes_text(self, text: str) -> str:
        if self.shapes == "drop" or not text:
            return ""
        out = self._shapes.get(text)
        if out is None:
            if not _SHAPE_TEXT.match(text):
                out = ""  # a shapes text with anything but numbers is not kept
            elif self.shapes == "keep":
                out = text
            else:
                out = _DIGITS.sub(lambda m: str(bucket_dim(int(m.group()))), text)
            if len(self._shapes) < 1 << 16:
                self._shapes[text] = out
        return out

    def types_text(self, text: str) -> str:
        return text if self.types == "keep" else ""
