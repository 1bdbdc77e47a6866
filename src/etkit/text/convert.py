"""ASTRA-sim 1.0 text workloads -> Chakra ETs, one graph per parallelism mode.

For MICRO, DATA, MODEL, HYBRID_DATA_MODEL, HYBRID_MODEL_DATA and HYBRID_DLRM the graph (node names,
kinds, durations, comm types and sizes, dependencies) is the reference converter's
(``chakra_converter Text``), with these deliberate deviations:

* a phase whose comm type is ``NONE`` gives **no node** (the reference writes an ALL_REDUCE for it);
  nodes that would have waited on it wait on what it waited on instead;
* node ids start at 0 in every rank file (the reference continues its counter across ranks);
* every node carries ``is_cpu_op = false`` (comm nodes must say so for ASTRA-sim);
* line 2's layer count must match the layer lines (the reference ignores it, but uses it to decide
  which MODEL/HYBRID layer gets no input-gradient collective);
* a DLRM embedding without an ALLTOALL forward comm is fine (the reference crashes).

Modes the reference rejects:

* ``HYBRID_TRANSFORMER``: the HYBRID_MODEL_DATA graph; forward and input-gradient collectives run in
  the rank's model-parallel group (``model_parallel_NPU_group`` consecutive ranks, as ASTRA-sim 1.0
  maps them onto the first network dimensions), weight-gradient collectives in its data-parallel group
  (the ranks with the same position in the other model-parallel groups);
* ``HYBRID_TRANSFORMER_FWD_IN_BCKWD``: the same plus activation recomputation: before the
  input-gradient compute of an initiating layer ``L``, the forward pass (compute and forward
  collective) is recomputed from the nearest checkpoint layer ``C <= L`` up to ``L - 1``, as ASTRA-sim
  1.0's ``Forward_In_BackPass`` state does;
* ``HYBRID_CUSTOMIZED``: the HYBRID_MODEL_DATA graph where each layer's 13th-column policy decides which
  collectives exist and where they run, as ASTRA-sim 1.0's involved dimensions do: DATA layers keep
  only the weight-gradient collective (all ranks), MODEL layers only forward and input-gradient ones
  (all ranks), hybrid layers all three (model-parallel / data-parallel groups).

Groups: with a model-parallel group size ``m`` (the Transformer header, or ``model_parallel_group=`` for
the HYBRID modes) the ranks split into model-parallel and data-parallel groups, written as ``pg_name``
and ``PREFIX.comm_groups.json``. HYBRID_MODEL_DATA puts data parallelism on the first dimension (so
data-parallel groups are consecutive ranks); the others put model parallelism first. A collective in a
group of one rank is dropped (it moves no data). Without ``m`` every collective spans all ranks.

Every rank's graph is the same up to ``pg_name``, so it is built once and stamped per rank.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import field
from pathlib import Path

from ..errors import UsageError
from ..executor import Executor
from ..format.schema import CommType
from ..model.groups import ProcessGroups
from ..model.job import Job
from ..model.template import Param, RankPlan, TraceTemplate, build_job, synthetic_metadata, write_job
from ..records import record
from .parse import Phase, TextLayer, TextWorkload, TextWorkloadError, read_text

__all__ = ["GroupLayout", "build_template", "convert_text", "group_layout", "write_text"]

#: A dependency handle: the node ids a dependent must wait for (several when a NONE comm passed through).
Handle = tuple[int, ...]
_NONE: Handle = ()

#: Communication scopes of a collective.
WORLD, MP, DP = "world", "mp", "dp"


@record(frozen=True)
class GroupLayout:
    """Model- and data-parallel groups of a job (``mp``/``dp`` per rank index their group's ``pg_name``)."""

    npus: int
    mp_size: int
    mp_groups: tuple[tuple[int, ...], ...]
    dp_groups: tuple[tuple[int, ...], ...]

    def process_groups(self) -> ProcessGroups:
        named = {}
        for i, members in enumerate(self.mp_groups + self.dp_groups):
            if len(members) > 1:
                named[str(i + 1)] = members
        return ProcessGroups.from_mapping(named)

    def params(self, rank: int) -> dict[str, str]:
        """``{"mp": pg_name, "dp": pg_name}`` of ``rank``."""
        out = {}
        for i, members in enumerate(self.mp_groups + self.dp_groups):
            if rank in members:
                out["mp" if i < len(self.mp_groups) else "dp"] = str(i + 1)
        return out


def group_layout(npus: int, mp_size: int, *, data_first: bool, source: str = "<text>") -> GroupLayout:
    """Split ``npus`` ranks into model-parallel groups of ``mp_size`` and data-parallel groups.

    ``data_first``: data parallelism on the innermost (consecutive) ranks, as HYBRID_MODEL_DATA.
    """
    if mp_size < 1 or npus % mp_size:
        raise TextWorkloadError(source, 1, f"{npus} NPUs cannot be split into model-parallel groups of {mp_size}")
    dp_size = npus // mp_size
    inner, outer = (dp_size, mp_size) if data_first else (mp_size, dp_size)
    blocks = tuple(tuple(range(b * inner, (b + 1) * inner)) for b in range(outer))
    strided = tuple(tuple(o + i * inner for i in range(outer)) for o in range(inner))
    mp, dp = (strided, blocks) if data_first else (blocks, strided)
    return GroupLayout(npus, mp_size, mp, dp)


@record
class _Builder:
    """Builds one rank's graph into a template; comm scopes become ``pg_name`` params."""

    tpl: TraceTemplate
    scoped: bool  # whether MP/DP scopes map to groups (else every collective spans all ranks)
    mp_alone: bool = False  # model-parallel groups of one rank: MP collectives are dropped
    dp_alone: bool = False

    def comp(self, layer: TextLayer, phase: str, time: int, *deps: Handle) -> Handle:
        return (self.tpl.comp(f"COMP_NODE_{layer.name}_{phase}", time, deps=_merge(deps)),)

    def comm(self, name: str, p: Phase, scope: str, *deps: Handle) -> Handle:
        """A collective of phase ``p``, or -- for NONE or a one-rank group -- a pass-through of ``deps``."""
        if p.comm is None or (scope == MP and self.mp_alone) or (scope == DP and self.dp_alone):
            return _merge(deps)
        pg = Param(scope) if self.scoped and scope != WORLD else None
        return (self.tpl.coll(f"COMM_COLL_NODE_{name}_{p.comm_token}", CommType(p.comm), p.size, pg_name=pg,
                              deps=_merge(deps)),)


def _merge(handles: Iterable[Handle]) -> Handle:
    return tuple(dict.fromkeys(i for h in handles for i in h))


@record
class _PassState:
    """What the next pass's forward waits on, per layer."""

    wg_comm: list[Handle] = field(default_factory=list)


def _micro(b: _Builder, layers: Sequence[TextLayer], state: _PassState) -> None:
    for layer in layers:
        b.comm(layer.name, layer.wg, WORLD)


def _data(b: _Builder, layers: Sequence[TextLayer], state: _PassState) -> None:
    n = len(layers)
    fwd: list[Handle] = []
    for i, layer in enumerate(layers):
        fwd.append(b.comp(layer, "FWD", layer.fwd.time, fwd[i - 1] if i else _NONE,
                          state.wg_comm[i] if state.wg_comm else _NONE))
    wg_comm = [_NONE] * n
    ig_prev = fwd[-1]
    for i in reversed(range(n)):
        layer = layers[i]
        wg = b.comp(layer, "BWD_WG", layer.wg.time, ig_prev)
        wg_comm[i] = b.comm(layer.name, layer.wg, WORLD, wg)
        if i:
            ig_prev = b.comp(layer, "BWD_IG", layer.ig.time, wg)
    state.wg_comm = wg_comm


def _layer_scopes(layer: TextLayer, mode: str) -> tuple[str | None, str | None, str | None]:
    """Scope of the fwd, ig and wg collectives of ``layer`` (None = the phase has no collective)."""
    policy = layer.policy if mode == "HYBRID_CUSTOMIZED" else mode
    if policy == "DATA":
        return None, None, WORLD
    if policy == "MODEL":
        return WORLD, WORLD, None
    return MP, MP, DP


def _hybrid(b: _Builder, layers: Sequence[TextLayer], state: _PassState, *, mode: str,
            recompute: dict[int, int] | None = None) -> None:
    """MODEL, HYBRID_*, Transformer and customised graphs: forward with collectives, then per layer
    (last first) input-gradient compute and collective, weight-gradient compute and collective."""
    n = len(layers)
    ig_suffix = "_IG_COMM_" if mode == "HYBRID_DATA_MODEL" else ""
    scopes = [_layer_scopes(layer, mode) for layer in layers]
    fwd_comm: list[Handle] = []
    for i, layer in enumerate(layers):
        f = b.comp(layer, "FWD", layer.fwd.time, state.wg_comm[i] if state.wg_comm else _NONE,
                   fwd_comm[i - 1] if i else _NONE)
        fwd_comm.append(_fwd_comm(b, layer, scopes[i][0], f))
    wg_comp: list[Handle] = [_NONE] * n
    wg_comm: list[Handle] = [_NONE] * n
    before_ig: tuple[Handle, ...] = (fwd_comm[-1],)
    for i in reversed(range(n)):
        layer = layers[i]
        if recompute and i in recompute:
            before_ig = (_recompute(b, layers, scopes, recompute[i], i, before_ig),)
        ig = b.comp(layer, "BWD_IG", layer.ig.time, *before_ig)
        ig_comm = ig
        _, ig_scope, wg_scope = scopes[i]
        if i and ig_scope is not None:
            ig_comm = b.comm(layer.name + ig_suffix, layer.ig, ig_scope, ig)
        wg_comp[i] = b.comp(layer, "BWD_WG", layer.wg.time, ig)
        if wg_scope is not None:
            wg_comm[i] = b.comm(layer.name, layer.wg, wg_scope, wg_comp[i])
        before_ig = (wg_comp[i], ig_comm)
    # MODEL has no weight-gradient collective: the next forward waits on the weight-gradient compute.
    state.wg_comm = [c or w for c, w in zip(wg_comm, wg_comp)]


def _fwd_comm(b: _Builder, layer: TextLayer, scope: str | None, f: Handle, suffix: str = "") -> Handle:
    return b.comm(layer.name + suffix, layer.fwd, scope, f) if scope is not None else f


def _recompute(b: _Builder, layers: Sequence[TextLayer], scopes: list, start: int, stop: int,
               deps: tuple[Handle, ...]) -> Handle:
    """Forward compute and collectives of layers ``start..stop-1`` again, after ``deps``."""
    last = _merge(deps)
    for j in range(start, stop):
        layer = layers[j]
        f = b.comp(layer, "FWD_RECOMPUTE", layer.fwd.time, last)
        last = _fwd_comm(b, layer, scopes[j][0], f, "_RECOMPUTE")
    return last


def _dlrm(b: _Builder, layers: Sequence[TextLayer], state: _PassState, *, last_bottom: int) -> None:
    n = len(layers)
    fwd: list[Handle] = []
    emb_comm: Handle = _NONE
    for i, layer in enumerate(layers):
        f = b.comp(layer, "FWD", layer.fwd.time, state.wg_comm[i] if state.wg_comm else _NONE,
                   fwd[i - 1] if i else _NONE, emb_comm if i == last_bottom else _NONE)
        fwd.append(f)
        # Only all-to-all forward collectives exist in DLRM (the embedding lookup exchange).
        if layer.fwd.comm == CommType.ALL_TO_ALL:
            comm = b.comm(layer.name, layer.fwd, WORLD, f)
            if i == 0:
                emb_comm = comm
    wg_comm: list[Handle] = [_NONE] * n
    ig_prev: Handle = fwd[-1]
    emb_grad: Handle = _NONE
    for i in reversed(range(n)):
        layer = layers[i]
        wg = b.comp(layer, "BWD_WG", layer.wg.time, ig_prev, emb_grad if i == 0 else _NONE)
        wg_comm[i] = b.comm(layer.name, layer.wg, WORLD, wg)
        if i:
            ig_prev = b.comp(layer, "BWD_IG", layer.ig.time, wg)
        if i == last_bottom + 1:
            # The embedding's input-gradient all-to-all starts once the top MLP's gradient is ready.
            emb_grad = b.comm(layers[0].name, layers[0].ig, WORLD, ig_prev)
    state.wg_comm = wg_comm


def _mp_size(w: TextWorkload, model_parallel_group: int | None) -> int | None:
    if w.mode in ("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD"):
        return model_parallel_group or w.model_parallel_group
    if model_parallel_group is not None and w.mode not in ("HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA",
                                                           "HYBRID_CUSTOMIZED"):
        raise UsageError(f"{w.source}: a model-parallel group size applies to HYBRID modes, not {w.mode}")
    return model_parallel_group


def _recompute_plan(w: TextWorkload) -> dict[int, int]:
    """Initiating layer -> first layer to recompute (its nearest checkpoint at or below it)."""
    return {layer: max(c for c in w.checkpoints if c <= layer) for layer in w.checkpoint_initiates}


def build_template(w: TextWorkload, passes: int, layout: GroupLayout | None = None) -> TraceTemplate:
    """One rank's graph for ``passes`` training passes (``pg_name`` as ``Param("mp")``/``Param("dp")``)."""
    if passes < 1:
        raise UsageError(f"passes must be at least 1, not {passes}")
    meta = synthetic_metadata("etkit.text", mode=w.mode, input_file=w.text, passes=passes)
    b = _Builder(TraceTemplate(meta), scoped=layout is not None)
    if layout is not None:
        b.mp_alone = layout.mp_size == 1
        b.dp_alone = layout.mp_size == layout.npus
    state = _PassState()
    for _ in range(passes):
        if w.mode == "MICRO":
            _micro(b, w.layers, state)
        elif w.mode == "DATA":
            _data(b, w.layers, state)
        elif w.mode == "HYBRID_DLRM":
            _dlrm(b, w.layers, state, last_bottom=int(w.last_bottom_layer or 0))
        else:
            _hybrid(b, w.layers, state, mode=w.mode,
                    recompute=_recompute_plan(w) if w.mode.endswith("FWD_IN_BCKWD") else None)
    if not len(b.tpl):
        raise TextWorkloadError(w.source, 3, f"{w.mode} workload has no collective to write (every comm type is NONE)")
    return b.tpl


def _prepare(w: TextWorkload, npus: int, passes: int,
             model_parallel_group: int | None) -> tuple[list[RankPlan], dict[str, TraceTemplate], ProcessGroups]:
    if npus < 1:
        raise UsageError(f"npus must be at least 1, not {npus}")
    mp = _mp_size(w, model_parallel_group)
    layout = None
    if mp is not None:
        layout = group_layout(npus, mp, data_first=w.mode == "HYBRID_MODEL_DATA", source=w.source)
    tpl = build_template(w, passes, layout)
    plans = [RankPlan(r, "all", layout.params(r) if layout else {}) for r in range(npus)]
    groups = layout.process_groups() if layout else ProcessGroups()
    return plans, {"all": tpl}, groups


def convert_text(path: str | os.PathLike[str] | TextWorkload, npus: int, passes: int = 1, *,
                 model_parallel_group: int | None = None) -> Job:
    """The job of a text workload on ``npus`` ranks for ``passes`` passes (in memory).

    ``path`` is a file or a parsed :class:`TextWorkload`; ``model_parallel_group`` overrides the
    Transformer header's group size or sets one for the HYBRID modes (default: all ranks).
    """
    w = path if isinstance(path, TextWorkload) else read_text(path)
    plans, templates, groups = _prepare(w, npus, passes, model_parallel_group)
    return build_job(plans, templates, groups=groups)


def write_text(path: str | os.PathLike[str], prefix: str | os.PathLike[str], npus: int, passes: int = 1, *,
               model_parallel_group: int | None = None, executor: Executor | None = None) -> list[Path]:
    """Convert ``path`` and write ``PREFIX.<rank>.et`` (+ ``PREFIX.comm_groups.json`` with groups)."""
    w = read_text(path)
    plans, templates, groups = _prepare(w, npus, passes, model_parallel_group)
    return write_job(prefix, plans, templates, groups=groups, executor=executor)
