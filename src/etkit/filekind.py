"""What a file is, from its first bytes: so that a file given in the wrong place is named for what it is.

Users hold many kinds of files beside their ``.et`` files: PyTorch host execution traces, Kineto traces,
etkit's linked traces and JSON twins, ``chakra_jsonizer`` output, comm-group files, ASTRA-sim network and
system configurations, text workloads. Every reader that expects one kind asks :func:`require` first, which
turns "a Kineto trace given to ``from-json``" into one line saying what the file is and which verb reads it,
instead of a decoding error deep inside the reader. Only the head of the file is read (gunzipped when it
is gzip), so sniffing costs a few KiB whatever the file's size.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path

from .errors import UsageError
from .fileio import GZIP_MAGIC, GZIP_WBITS, inflater
from .records import record

__all__ = ["FileKind", "KINDS", "sniff", "sniff_bytes", "require", "read_head", "is_kineto", "is_host_trace"]

#: Bytes of (decompressed) head that decide: enough for every header we look at (a Kineto header with
#: hundreds of devices and process groups is still well under this).
HEAD_BYTES = 64 << 10


@record(frozen=True)
class FileKind:
    """One kind of file: its ``name``, how a message calls it and the verb that reads it."""

    name: str
    label: str
    hint: str = ""

    def describe(self, path: str | os.PathLike[str]) -> str:
        """``<path> is <label>: <hint>`` (one line)."""
        return f"{path} is {self.label}" + (f": {self.hint}" if self.hint else "")


_ALL = (
    FileKind("chakra-et", "a Chakra execution trace (.et)",
             "it needs no conversion: read it with `etkit info`, `etkit analyze` or `etkit simulate`"),
    FileKind("host-et", "a PyTorch host execution trace", "convert it with `etkit convert pytorch`"),
    FileKind("linked", "an etkit linked trace (host execution trace + Kineto)", "convert it with `etkit convert pytorch`"),
    FileKind("kineto", "a Kineto (PyTorch profiler) trace",
             "convert it with `etkit convert kineto` (or `etkit convert pytorch` with its host execution trace); "
             "`etkit analyze`, `report`, `timeline` and `diff` read it as it is"),
    FileKind("json-twin", "etkit's JSON twin of an .et file", "turn it back into an .et with `etkit from-json`"),
    FileKind("jsonizer", "chakra_jsonizer output (an .et file as JSON)", "turn it back into an .et with `etkit from-json`"),
    FileKind("comm-groups", "a comm-groups file ({\"<pg_name>\": [ranks]})", "give it with --comm-groups"),
    FileKind("astra-system", "an ASTRA-sim system configuration", "give it with --system"),
    FileKind("astra-network", "an ASTRA-sim network configuration", "give it with --network"),
    FileKind("etkit-system", "an etkit system file (device + network + system)", "give it with --system"),
    FileKind("text-workload", "an ASTRA-sim 1.0 text workload", "convert it with `etkit convert text`"),
    FileKind("json", "a JSON file of no kind etkit knows"),
    FileKind("yaml", "a YAML or text file of no kind etkit knows"),
    FileKind("binary", "a binary file of no kind etkit knows"),
    FileKind("empty", "empty"),
    FileKind("directory", "a directory"),
    FileKind("missing", "missing (no such file)"),
)
#: Every kind by name.
KINDS: dict[str, FileKind] = {k.name: k for k in _ALL}

#: First words of ASTRA-sim 1.0 text workloads (the parallelism line).
_TEXT_WORKLOADS = ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_TRANSFORMER",
                   "HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED", "HYBRID_CUSTOMIZED",
                   "MICRO", "DISTRIBUTED_INFERENCE")
#: Every JSON string, consumed whole (so a quote inside one never starts a match: linear time), with the colon
#: that makes it a key; a string the head cuts off ends at the end of the head.
_STRING = re.compile(rb'"((?:[^"\\]|\\.)*)(?:"(\s*:)?|\\?\Z)')
_GROUPS = re.compile(rb'^\{\s*"[^"]*"\s*:\s*\[\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\]\s*[,}]')
_SYSTEM_KEYS = {b"scheduling-policy", b"endpoint-delay", b"active-chunks-per-dimension", b"preferred-dataset-splits",
                b"all-reduce-implementation", b"all-gather-implementation", b"reduce-scatter-implementation",
                b"all-to-all-implementation", b"collective-optimization", b"local-mem-bw", b"roofline-enabled"}
_YAML_KEY = re.compile(rb"^([A-Za-z_][\w-]*)\s*:", re.MULTILINE)


def read_head(path: str | os.PathLike[str], limit: int = HEAD_BYTES) -> bytes:
    """The first ``limit`` bytes of ``path``, gunzipped when it is gzip; nothing for a FIFO or ``<(...)``,
    whose bytes would be taken from the reader that comes next."""
    if os.path.exists(path) and not os.path.isfile(path):
        return b""
    with open(path, "rb") as raw:
        head = raw.read(limit)
    if head.startswith(GZIP_MAGIC):
        decompressobj, error = inflater()
        try:
            return decompressobj(GZIP_WBITS).decompress(head, limit)
        except error:
            import gzip  # (imported only here: reading a .gz input otherwise goes through fileio.inflater alone)

            try:  # a gzip member split oddly: fall back to the gzip module
                with gzip.open(path, "rb") as zipped:
                    return zipped.read(limit)
            except (OSError, EOFError):
                return head
    return head


#: The bytes text may hold: all but the control characters other than tab, line feed, form feed and return.
_TEXT_BYTES = bytes(range(32, 256)) + b"\t\n\x0c\r"


def _is_text(head: bytes) -> bool:
    """Whether the first 4 KiB hold no control character but tab, line feed, form feed and return (no NUL)."""
    return not head[:4096].translate(None, _TEXT_BYTES)  # (what is left once text's bytes are dropped)


def _looks_like_et(head: bytes) -> bool:
    """A varint length, then a GlobalMetadata message (field 1 ``version`` or 2 ``attr``) or an empty one."""
    length, shift, pos = 0, 0, 0
    while pos < min(len(head), 5):
        byte = head[pos]
        length |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            break
        shift += 7
    else:
        return False
    if length == 0:
        return True
    from .format.tags import META_ATTR, META_VERSION  # here: sniffing a file needs no protobuf until now

    return pos < len(head) and head[pos] in (META_VERSION, META_ATTR)


def sniff_bytes(head: bytes) -> FileKind:
    """The kind of a file whose first (decompressed) bytes are ``head``."""
    if not head:
        return KINDS["empty"]
    if not _is_text(head):
        return KINDS["chakra-et" if _looks_like_et(head) else "binary"]
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"{"):
        return _json_kind(text)
    if text.startswith(b"["):
        return KINDS["kineto" if re.match(rb'\[\s*\{\s*"(?:ph|name|pid|cat)"', text) else "json"]
    first = text.split(None, 1)[0].decode("ascii", "replace") if text.split(None, 1) else ""
    if first in _TEXT_WORKLOADS:
        return KINDS["text-workload"]
    keys = set(_YAML_KEY.findall(text))
    if {b"topology", b"npus_count"} & keys:
        return KINDS["astra-network"]
    if b"preset" in keys or (b"network" in keys and ({b"device", b"system"} & keys)):
        return KINDS["etkit-system"]
    return KINDS["yaml"]


class _Keys:
    """The keys of a JSON head in order, read from it only as far as a question needs (reading all of a 64 KiB
    head with :data:`_STRING` costs ~10 ms; most heads are told by their first few keys)."""

    def __init__(self, text: bytes) -> None:
        self._matches = _STRING.finditer(text)
        self._seen: list[bytes] = []

    def _more(self) -> bool:
        for m in self._matches:
            if m.group(2):
                self._seen.append(m.group(1))
                return True
        return False

    def first(self, n: int) -> list[bytes]:
        """The first ``n`` keys (fewer when the head has fewer)."""
        while len(self._seen) < n and self._more():
            pass
        return self._seen[:n]

    def index(self, key: bytes) -> int:
        """The position of the first ``key``, -1 when the head has none."""
        if key in self._seen:
            return self._seen.index(key)
        while self._more():
            if self._seen[-1] == key:
                return len(self._seen) - 1
        return -1

    def every(self) -> list[bytes]:
        while self._more():
            pass
        return self._seen


def _json_kind(text: bytes) -> FileKind:
    keys = _Keys(text[:HEAD_BYTES])
    first = (keys.first(1) or [b""])[0]
    if re.match(rb'\{\s*"format"\s*:\s*"etkit-et-json"', text):
        return KINDS["json-twin"]
    if first in (b"schemaVersion", b"traceEvents", b"displayTimeUnit", b"deviceProperties", b"distributedInfo",
                 b"traceName"):
        return KINDS["kineto"]
    if first == b"schema" or b"schema" in keys.first(4):
        nodes = keys.index(b"nodes")
        if nodes >= 0:
            return KINDS["linked" if b"finish_ts" in keys.first(nodes) else "host-et"]
        if first == b"schema":
            return KINDS["linked" if b"finish_ts" in keys.every() else "host-et"]
    if first in (b"attr", b"version"):
        return KINDS["jsonizer"]
    if first in (b"id", b"name") and b"type" in keys.first(12) and (
            keys.index(b"ctrlDeps") >= 0 or keys.index(b"dataDeps") >= 0 or keys.index(b"durationMicros") >= 0):
        return KINDS["jsonizer"]
    if _GROUPS.match(text):
        return KINDS["comm-groups"]
    every = keys.every()
    if _SYSTEM_KEYS.intersection(every):
        return KINDS["astra-system"]
    if b"traceEvents" in every:
        return KINDS["kineto"]
    return KINDS["json"]


def sniff(path: str | os.PathLike[str]) -> FileKind:
    """The kind of the file at ``path``, from its head (see :data:`KINDS`)."""
    p = Path(path)
    if p.is_dir():
        return KINDS["directory"]
    if p.exists() and not p.is_file():  # a FIFO or <(...): reading its head would take it from the reader
        return KINDS["binary"]
    try:
        return sniff_bytes(read_head(p))
    except FileNotFoundError:
        return KINDS["missing"]
    except OSError:
        return KINDS["binary"]  # unreadable here: the reader says why


def require(path: str | os.PathLike[str], accepted: Collection[str], *, wanted: str) -> FileKind:
    """The kind of ``path``; raises :class:`UsageError` ``"<path> is <what it is>, not <wanted>: <hint>"`` when
    it is a kind etkit knows that is not in ``accepted`` (a file of no known kind is left to the reader)."""
    kind = sniff(path)
    if kind.name in accepted or kind.name in ("binary", "missing"):
        return kind
    if kind.name == "empty":
        raise UsageError(f"{path}: the file is empty, not {wanted}")
    raise UsageError(f"{path} is {kind.label}, not {wanted}" + (f": {kind.hint}" if kind.hint else ""))


def is_kineto(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a Kineto (PyTorch profiler / Chrome) trace."""
    return sniff(path).name == "kineto"


def is_host_trace(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a PyTorch host execution trace or an etkit linked trace."""
    return sniff(path).name in ("host-et", "linked")
