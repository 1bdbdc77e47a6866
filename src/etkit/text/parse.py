"""Reading ASTRA-sim 1.0 text workloads into :class:`TextWorkload` records.

Format (whitespace separated, CRLF or LF, blank lines ignored anywhere after the header)::

    <MODE> [header fields]            line 1
    <number of layers>                line 2
    <name> <reserved> <fwd time> <fwd comm> <fwd size> <ig time> <ig comm> <ig size>
           <wg time> <wg comm> <wg size> <wg update time> [<layer policy>]     one line per layer

Header fields by mode: ``HYBRID_DLRM``/``HYBRID_DLRM_ENHANCED`` take the index of the last bottom-MLP
layer (a bare integer, or ``DLRM_LAST_BOTTOM_LAYER: n``); ``HYBRID_TRANSFORMER`` takes
``model_parallel_NPU_group: n``; ``HYBRID_TRANSFORMER_FWD_IN_BCKWD`` also ``checkpoints: k l1 .. lk`` and
``checkpoint_initiates: k l1 .. lk``. ``HYBRID_CUSTOMIZED`` layers carry a 13th column, the layer's own
policy (``DATA``, ``MODEL``, ``HYBRID_DATA_MODEL`` or ``HYBRID_MODEL_DATA``).

Every fault is reported as ``<file>:<line>: <what is wrong>`` (:class:`TextWorkloadError`).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import EtkitError
from ..format.schema import CommType
from ..records import record

__all__ = ["COMM_TYPES", "MODES", "LAYER_POLICIES", "TextLayer", "TextWorkload", "TextWorkloadError",
           "parse_text", "read_text"]

#: Comm type tokens of the text format (``NONE`` = no communication).
COMM_TYPES: dict[str, CommType | None] = {
    "ALLREDUCE": CommType.ALL_REDUCE,
    "ALLGATHER": CommType.ALL_GATHER,
    "ALLTOALL": CommType.ALL_TO_ALL,
    "REDUCESCATTER": CommType.REDUCE_SCATTER,
    "NONE": None,
}

#: Every parallelism keyword accepted on line 1 (``HYBRID_DLRM_ENHANCED`` is ``HYBRID_DLRM``).
MODES = ("MICRO", "DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM",
         "HYBRID_DLRM_ENHANCED", "HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_CUSTOMIZED")

#: Per-layer policies a ``HYBRID_CUSTOMIZED`` layer may name.
LAYER_POLICIES = ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA")


class TextWorkloadError(EtkitError, ValueError):
    """A text workload that cannot be converted; the message names the file and the line."""

    def __init__(self, source: str, line: int, message: str) -> None:
        self.source = source
        self.line = line
        super().__init__(f"{source}:{line}: {message}")


@record(frozen=True)
class Phase:
    """One phase of a layer: compute time (µs as written) and its collective (``comm`` None = NONE)."""

    time: int
    comm_token: str
    size: int

    @property
    def comm(self) -> CommType | None:
        return COMM_TYPES[self.comm_token]


@record(frozen=True)
class TextLayer:
    """One layer line: forward, input-gradient and weight-gradient phases."""

    name: str
    fwd: Phase
    ig: Phase
    wg: Phase
    update_time: int
    policy: str | None  # HYBRID_CUSTOMIZED only
    line: int


@record(frozen=True)
class TextWorkload:
    """A parsed text workload. ``mode`` is normalised (``HYBRID_DLRM_ENHANCED`` -> ``HYBRID_DLRM``)."""

    source: str
    text: str
    mode: str
    layers: tuple[TextLayer, ...]
    last_bottom_layer: int | None = None
    model_parallel_group: int | None = None
    checkpoints: tuple[int, ...] = ()
    checkpoint_initiates: tuple[int, ...] = ()


def _int(source: str, line: int, token: str, what: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise TextWorkloadError(source, line, f"{what} must be an integer, not {token!r}") from None


def _header(source: str, tokens: list[str]) -> dict[str, object]:
    """Mode-specific fields of line 1."""
    mode = tokens[0]
    rest = tokens[1:]
    out: dict[str, object] = {}
    if mode in ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED"):
        if rest[:1] == ["DLRM_LAST_BOTTOM_LAYER:"]:
            rest = rest[1:]
        if len(rest) != 1:
            raise TextWorkloadError(source, 1, f"{mode} needs one field after it, the index of the last "
                                               "bottom-MLP layer")
        out["last_bottom_layer"] = _int(source, 1, rest[0], "the last bottom-MLP layer index")
        return out
    if mode not in ("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD"):
        if rest:
            raise TextWorkloadError(source, 1, f"unexpected header field {rest[0]!r} after {mode}")
        return out
    i = 0
    while i < len(rest):
        key = rest[i]
        if key == "model_parallel_NPU_group:" and i + 1 < len(rest):
            out["model_parallel_group"] = _int(source, 1, rest[i + 1], "model_parallel_NPU_group")
            i += 2
        elif key in ("checkpoints:", "checkpoint_initiates:") and mode.endswith("FWD_IN_BCKWD") \
                and i + 1 < len(rest):
            count = _int(source, 1, rest[i + 1], key[:-1] + " count")
            values = rest[i + 2:i + 2 + count]
            if len(values) != count:
                raise TextWorkloadError(source, 1, f"{key} announces {count} layers but lists {len(values)}")
            out[key[:-1]] = tuple(_int(source, 1, v, f"a {key[:-1]} layer") for v in values)
            i += 2 + count
        else:
            raise TextWorkloadError(source, 1, f"unsupported header field {key!r} for {mode}")
    if "model_parallel_group" not in out:
        raise TextWorkloadError(source, 1, f"{mode} needs 'model_parallel_NPU_group: <n>' on line 1")
    if out["model_parallel_group"] < 1:  # type: ignore[operator]
        raise TextWorkloadError(source, 1, "model_parallel_NPU_group must be at least 1")
    return out


def _phase(source: str, line: int, cols: list[str], at: int, what: str) -> Phase:
    token = cols[at + 1]
    if token not in COMM_TYPES:
        raise TextWorkloadError(source, line, f"unknown {what} comm type {token!r} (column {at + 2}); expected "
                                              f"one of {', '.join(COMM_TYPES)}")
    time = _int(source, line, cols[at], f"the {what} compute time (column {at + 1})")
    size = _int(source, line, cols[at + 2], f"the {what} comm size (column {at + 3})")
    if time < 0 or size < 0:
        raise TextWorkloadError(source, line, f"negative {what} time or size")
    return Phase(time, token, size)


def _layer(source: str, line: int, text: str, mode: str) -> TextLayer:
    cols = text.split()
    if len(cols) < 12:
        raise TextWorkloadError(source, line, f"a layer needs at least 12 columns, this line has {len(cols)}")
    _int(source, line, cols[1], "the reserved column 2")
    policy = None
    if mode == "HYBRID_CUSTOMIZED":
        if len(cols) < 13:
            raise TextWorkloadError(source, line, "HYBRID_CUSTOMIZED layers need a 13th column, the layer's "
                                                  f"policy ({', '.join(LAYER_POLICIES)})")
        policy = cols[12]
        if policy not in LAYER_POLICIES:
            raise TextWorkloadError(source, line, f"unknown layer policy {policy!r}; expected one of "
                                                  f"{', '.join(LAYER_POLICIES)}")
    return TextLayer(
        name=cols[0],
        fwd=_phase(source, line, cols, 2, "forward"),
        ig=_phase(source, line, cols, 5, "input-gradient"),
        wg=_phase(source, line, cols, 8, "weight-gradient"),
        update_time=_int(source, line, cols[11], "the weight-update time (column 12)"),
        policy=policy,
        line=line,
    )


def parse_text(text: str, source: str = "<text>") -> TextWorkload:
    """Parse the content of a text workload; ``source`` names it in error messages."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    header = lines[0].split() if lines else []
    if not header:
        raise TextWorkloadError(source, 1, "empty first line; expected a parallelism keyword "
                                           f"({', '.join(MODES)})")
    mode = header[0]
    if mode not in MODES:
        raise TextWorkloadError(source, 1, f"unknown parallelism {mode!r}; expected one of {', '.join(MODES)}")
    fields = _header(source, header)
    if len(lines) < 2 or not lines[1].split():
        raise TextWorkloadError(source, 2, "expected the number of layers on line 2")
    count_tokens = lines[1].split()
    if len(count_tokens) != 1:
        raise TextWorkloadError(source, 2, f"expected only the number of layers, found {' '.join(count_tokens)!r}")
    declared = _int(source, 2, count_tokens[0], "the number of layers")
    layers = tuple(_layer(source, n, body, mode) for n, body in enumerate(lines[2:], start=3) if body.strip())
    if len(layers) != declared:
        where = layers[-1].line if layers else 2
        raise TextWorkloadError(source, where, f"line 2 declares {declared} layers but the file has {len(layers)}")
    if not layers:
        raise TextWorkloadError(source, 2, "the workload has no layer")
    workload = TextWorkload(
        source=source, text=text.replace("\r\n", "\n"),
        mode="HYBRID_DLRM" if mode == "HYBRID_DLRM_ENHANCED" else mode, layers=layers,
        last_bottom_layer=fields.get("last_bottom_layer"),  # type: ignore[arg-type]
        model_parallel_group=fields.get("model_parallel_group"),  # type: ignore[arg-type]
        checkpoints=fields.get("checkpoints", ()),  # type: ignore[arg-type]
        checkpoint_initiates=fields.get("checkpoint_initiates", ()),  # type: ignore[arg-type]
    )
    _check_indices(workload, len(layers))
    return workload


def _check_indices(w: TextWorkload, n: int) -> None:
    if w.last_bottom_layer is not None and not 1 <= w.last_bottom_layer <= n - 2:
        raise TextWorkloadError(w.source, 1, f"last bottom-MLP layer {w.last_bottom_layer} must be between 1 "
                                             f"and {n - 2} (layer 0 is the embedding, a top layer must follow)")
    for what, values in (("checkpoint", w.checkpoints), ("checkpoint initiate", w.checkpoint_initiates)):
        for v in values:
            if not 0 <= v < n:
                raise TextWorkloadError(w.source, 1, f"{what} layer {v} is outside 0..{n - 1}")
    for v in w.checkpoint_initiates:
        if not any(c <= v for c in w.checkpoints):
            raise TextWorkloadError(w.source, 1, f"checkpoint initiate layer {v} has no checkpoint at or below it")


def read_text(path: str | os.PathLike[str]) -> TextWorkload:
    """Read and parse the text workload file ``path``."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise EtkitError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise EtkitError(f"{path}: not a UTF-8 text file ({exc.reason} at byte {exc.start})") from None
    return parse_text(text, str(path))
