"""Synthetic LLM training jobs: one training step of a transformer under a parallel layout, as Chakra ETs.

``llm(model, dp=, tp=, pp=, ...)`` returns an :class:`LlmJob`: one encoded template per pipeline stage
(the only thing that differs between roles; every rank of a stage has the same graph) and, per rank, the
few values stamped into it (its ``pg_name`` per group kind, its pipeline peers). Nothing is built per
rank until the job is written or materialised, so a 16k-rank job costs ``pp`` templates plus a byte copy
per rank (see :mod:`etkit.model.template`).

What a stage's graph holds, per micro-batch in pipeline-schedule order (:func:`~etkit.generate.layout.pipeline_order`):
forward and backward compute nodes per GEMM group of each layer (``num_ops`` = FLOPs, ``tensor_size`` =
bytes touched, duration from the device roofline), the tensor-parallel collectives of Megatron layers
(all-reduce, or all-gather + reduce-scatter with sequence parallelism), the expert all-to-alls of MoE
layers, pipeline send/recv of activations and gradients, and after the last micro-batch's backward the
data-parallel gradient reduction in buckets that overlap the rest of backward, then the optimizer step.
Compute nodes form one chain per rank (the device runs one kernel at a time); communication hangs off it,
and compute waits for a collective only when it consumes its result.

FLOP accounting (``docs/guide/generate-llm.md``): each GEMM (x × y)·(y × z) costs 2xyz FLOPs; attention
scores and weighted sum 4·b·s²·h per layer; backward is twice forward; recomputation replays forward.
The input embedding is a lookup (no FLOPs), so a step costs 6·N·tokens + 12·L·s·h·tokens with N the
parameters that take part in matrix products (layers + output head).
"""

from __future__ import annotations

import dataclasses
import math
import os

from ..errors import UsageError
from ..executor import Executor
from ..format.schema import CommType
from ..model.devices import Device, get_device
from ..model.template import Param, RankPlan, TraceTemplate, synthetic_metadata
from ..records import record
from .layout import GroupTable, ParallelLayout, build_groups, pipeline_order
from .training import (
    ADAM_BYTES_PER_PARAM,
    ADAM_FLOPS_PER_PARAM,
    DTYPE_BYTES,
    ComputeChain,
    GeneratedJob,
    GradientBuckets,
    JobSummary,
)

__all__ = [
    "DTYPE_BYTES",
    "LlmJob",
    "LlmSpec",
    "MODELS",
    "ModelConfig",
    "TrainConfig",
    "get_model",
    "llm",
    "write_llm",
]



@record(frozen=True)
class ModelConfig:
    """A decoder-only transformer. ``ffn_kind`` "swiglu" has 3 FFN matrices, "gelu" 2.

    MoE: ``experts`` > 1 experts per layer, each token routed to ``top_k``; ``capacity_factor`` scales
    the all-to-all volume. ``tied_embeddings``: the output head reuses the input embedding.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq_len: int
    ffn_kind: str = "swiglu"
    experts: int = 1
    top_k: int = 1
    capacity_factor: float = 1.0
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "experts", "top_k"):
            if getattr(self, name) < 1:
                raise UsageError(f"model {self.name}: {name} must be >= 1")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise UsageError(f"model {self.name}: heads must divide hidden and kv heads must divide heads")
        if self.ffn_kind not in ("swiglu", "gelu"):
            raise UsageError(f"model {self.name}: ffn kind must be swiglu or gelu")
        if self.top_k > self.experts:
            raise UsageError(f"model {self.name}: top-k {self.top_k} exceeds {self.experts} experts")

    @property
    def kv_hidden(self) -> int:
        return self.hidden * self.kv_heads // self.heads

    @property
    def ffn_matrices(self) -> int:
        return 3 if self.ffn_kind == "swiglu" else 2

    @property
    def is_moe(self) -> bool:
        return self.experts > 1


#: Public figures (docs/llm-workloads.md). GPT-3 ties its embeddings; Llama and Mixtral do not.
MODELS: dict[str, ModelConfig] = {
    "gpt3-175b": ModelConfig("gpt3-175b", 96, 12288, 96, 96, 49152, 50257, 2048, "gelu", tied_embeddings=True),
    "llama3-8b": ModelConfig("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    "llama3-70b": ModelConfig("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    "llama3-405b": ModelConfig("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192),
    "mixtral-8x7b": ModelConfig("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096, experts=8, top_k=2),
}


def get_model(model: str | ModelConfig, **overrides: object) -> ModelConfig:
    """A preset by name (or a given config) with fields replaced by ``overrides`` (None values ignored)."""
    if isinstance(model, str):
        if model.lower() not in MODELS:
            raise UsageError(f"unknown model {model!r}; presets: {', '.join(MODELS)}")
        model = MODELS[model.lower()]
    changes = {k: v for k, v in overrides.items() if v is not None}
    if not changes:
        return model
    unknown = set(changes) - {f.name for f in dataclasses.fields(ModelConfig)}
    if unknown:
        raise UsageError(f"unknown model field(s): {', '.join(sorted(unknown))}")
    return dataclasses.replace(model, **changes)  # type: ignore[arg-type]


@record(frozen=True)
class TrainConfig:
    """One training step: ``microbatches`` micro-batches of ``micro_batch`` sequences per data-parallel rank."""

    micro_batch: int = 1
    microbatches: int = 8
    dtype: str = "bf16"
    grad_dtype: str = "fp32"

    def __post_init__(self) -> None:
        if self.micro_batch < 1 or self.microbatches < 1:
            raise UsageError("training: micro-batch size and number of micro-batches must be >= 1")
        for name in ("dtype", "grad_dtype"):
            if getattr(self, name) not in DTYPE_BYTES:
                raise UsageError(f"training: {name} must be one of {', '.join(DTYPE_BYTES)}")

    @property
    def act_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def grad_bytes(self) -> int:
        return DTYPE_BYTES[self.grad_dtype]


@record(frozen=True)
class LlmSpec:
    """Everything that defines a generated LLM job (hashable, picklable)."""

    model: ModelConfig
    train: TrainConfig
    layout: ParallelLayout
    device: Device

    def __post_init__(self) -> None:
        m, t = self.model, self.layout.tp
        if m.heads % t or m.hidden % t or m.ffn % t:
            raise UsageError(f"tensor parallel {t} must divide heads {m.heads}, hidden {m.hidden} and FFN {m.ffn}")
        if m.kv_heads % t and t % m.kv_heads:
            raise UsageError(f"tensor parallel {t} and kv heads {m.kv_heads}: one must divide the other")
        if self.layout.pp > m.layers:
            raise UsageError(f"pipeline parallel {self.layout.pp} exceeds {m.layers} layers")
        if self.layout.ep > 1 and (not m.is_moe or m.experts % self.layout.ep):
            raise UsageError(f"expert parallel {self.layout.ep} needs an MoE model whose experts it divides")
        if self.layout.sequence_parallel and m.seq_len % t:
            raise UsageError(f"sequence parallel: tensor parallel {t} must divide sequence length {m.seq_len}")

    @property
    def tokens(self) -> int:
        """Tokens per micro-batch on one rank."""
        return self.train.micro_batch * self.model.seq_len

    @property
    def vocab_padded(self) -> int:
        """Vocabulary padded to a multiple of ``tp`` (Megatron pads so vocab-parallel shards are equal)."""
        t = self.layout.tp
        return -(-self.model.vocab // t) * t

    def stage_layers(self, stage: int) -> range:
        """Global indices of the layers on ``stage`` (the first ``L % pp`` stages get one more)."""
        per, extra = divmod(self.model.layers, self.layout.pp)
        start = stage * per + min(stage, extra)
        return range(start, start + per + (1 if stage < extra else 0))


# -- the operations of one block (embedding, layer, head) ------------------------------------------

@record(frozen=True)
class _Op:
    """One step of a block's forward pass on one rank, for one micro-batch.

    ``kind``: "comp" (a compute node), "tp_enter" / "tp_exit" (Megatron's f / g conjugate operators around
    a column-parallel ... row-parallel span), "a2a" (expert dispatch or combine). ``params``: parameters
    on this rank whose gradients this op's backward produces.
    """

    kind: str
    name: str
    flops: int = 0
    nbytes: int = 0
    params: int = 0
    expert: bool = False


@record(frozen=True)
class _Block:
    name: str
    ops: tuple[_Op, ...]
    is_layer: bool = True

    @property
    def dense_params(self) -> int:
        return sum(op.params for op in self.ops if not op.expert)

    @property
    def expert_params(self) -> int:
        return sum(op.params for op in self.ops if op.expert)


def _gemm(name: str, rows: int, inner: int, cols: int, beta: int, *, expert: bool = False) -> _Op:
    """Activations (rows × inner) times a weight (inner × cols): 2·rows·inner·cols FLOPs, three operands' bytes."""
    return _Op("comp", name, 2 * rows * inner * cols, beta * (rows * inner + inner * cols + rows * cols),
               inner * cols, expert)


def _layer_ops(spec: LlmSpec) -> tuple[_Op, ...]:
    m, t, beta = spec.model, spec.layout.tp, spec.train.act_bytes
    b, s, h = spec.train.micro_batch, m.seq_len, m.hidden
    tokens = b * s
    # With fewer kv heads than tensor-parallel ranks, each rank keeps one (replicated) kv head.
    head_dim = h // m.heads
    kv_cols = m.kv_hidden // t if m.kv_heads % t == 0 else head_dim
    qkv = h // t + 2 * kv_cols
    ops = [
        _Op("tp_enter", "attn"),
        _gemm("attn_qkv", tokens, h, qkv, beta),
        # Scores (QK^T) and weighted sum, 2·b·s²·h/t FLOPs each; flash attention reads Q, K, V, writes O.
        _Op("comp", "attn_core", 4 * b * s * s * h // t, beta * tokens * (qkv + h // t)),
        _gemm("attn_out", tokens, h // t, h, beta),
        _Op("tp_exit", "attn"),
    ]
    up_cols = (m.ffn_matrices - 1) * m.ffn // t
    if not m.is_moe:
        ops += [_Op("tp_enter", "mlp"), _gemm("mlp_up", tokens, h, up_cols, beta),
                _gemm("mlp_down", tokens, m.ffn // t, h, beta), _Op("tp_exit", "mlp")]
        return tuple(ops)
    # MoE: the router is replicated on tensor-parallel ranks; each rank runs top_k·tokens through its
    # local experts (balanced routing) and holds experts/ep experts' weights.
    local_experts = m.experts // spec.layout.ep
    routed = tokens * m.top_k
    up = _gemm("expert_up", routed, h, up_cols, beta, expert=True)
    down = _gemm("expert_down", routed, m.ffn // t, h, beta, expert=True)
    ops += [_gemm("router", tokens, h, m.experts, beta),
            _Op("a2a", "dispatch"), _Op("tp_enter", "moe"),
            dataclasses.replace(up, params=up.params * local_experts),
            dataclasses.replace(down, params=down.params * local_experts),
            _Op("tp_exit", "moe"), _Op("a2a", "combine")]
    return tuple(ops)


def _stage_blocks(spec: LlmSpec, stage: int) -> list[_Block]:
    m, t, beta = spec.model, spec.layout.tp, spec.train.act_bytes
    tokens, h, vocab = spec.tokens, m.hidden, spec.vocab_padded
    last = spec.layout.pp - 1
    blocks = []
    if stage == 0:
        # Vocab-parallel lookup: reads one row per token; its output is summed over the tensor group.
        embed = _Op("comp", "embedding", 0, beta * tokens * h + 8 * tokens, vocab * h // t)
        blocks.append(_Block("embedding", (embed, _Op("tp_exit", "embedding")), is_layer=False))
    layer_ops = _layer_ops(spec)
    blocks += [_Block(f"layer{i}", layer_ops) for i in spec.stage_layers(stage)]
    if stage == last:
        head = _gemm("lm_head", tokens, h, vocab // t, beta)
        if m.tied_embeddings and spec.layout.pp == 1:
            head = dataclasses.replace(head, params=0)  # the embedding's gradient already counts it
        loss = _Op("comp", "loss", 4 * tokens * vocab // t, (beta + 4) * tokens * vocab // t)
        blocks.append(_Block("head", (_Op("tp_enter", "head"), head, loss), is_layer=False))
    return blocks


# -- building one stage's template -----------------------------------------------------------------

_TP_COLLECTIVES = {  # (conjugate op, sequence parallel) -> (forward collective, backward collective)
    ("tp_enter", False): (None, CommType.ALL_REDUCE),
    ("tp_exit", False): (CommType.ALL_REDUCE, None),
    ("tp_enter", True): (CommType.ALL_GATHER, CommType.REDUCE_SCATTER),
    ("tp_exit", True): (CommType.REDUCE_SCATTER, CommType.ALL_GATHER),
}
_COMM_NAMES = {CommType.ALL_REDUCE: "all_reduce", CommType.ALL_GATHER: "all_gather",
               CommType.REDUCE_SCATTER: "reduce_scatter", CommType.ALL_TO_ALL: "all_to_all"}


class _StageBuilder(ComputeChain):
    """Emits one stage's nodes into a template: the compute chain, the collectives, p2p, gradient sync."""

    def __init__(self, spec: LlmSpec, stage: int, groups: GroupTable, tpl: TraceTemplate) -> None:
        super().__init__(tpl, spec.device)
        layout = spec.layout
        self.spec, self.stage = spec, stage
        self.blocks = _stage_blocks(spec, stage)
        sample = layout.stage_ranks(stage)[0]
        self.has = {kind: kind in groups.names and bool(groups.names[kind][sample] >= 0)
                    for kind in ("tp", "dp", "ep", "edp", "emb")}
        self.act = spec.tokens * spec.model.hidden * spec.train.act_bytes
        self.sp = layout.sequence_parallel
        bucket_params = max(1, layout.bucket_bytes // spec.train.grad_bytes)
        self.buckets = {"dp": GradientBuckets(bucket_params), "edp": GradientBuckets(bucket_params)}
        self.grad_colls: list[int] = []
        self.reduced: list[tuple[str, int]] = []  # (group kind, params) per gradient bucket
        self.gather_chain: list[int] = []   # ZeRO-3: the last parameter all-gather(s)
        self.gather_anchor: list[int] = []  # ZeRO-3: the compute node before the block being run

    # -- passes --

    def tp_coll(self, prefix: str, op: _Op, backward: bool) -> None:
        if not self.has["tp"]:
            return
        comm = _TP_COLLECTIVES[(op.kind, self.sp)][1 if backward else 0]
        if comm is None:
            return
        size = self.act // self.spec.layout.tp if comm == CommType.ALL_GATHER else self.act
        self.coll(f"{prefix}.{op.name}.tp_{_COMM_NAMES[comm]}", comm, size, "tp")

    def a2a(self, prefix: str, op: _Op) -> None:
        if not self.has["ep"]:
            return
        m = self.spec.model
        size = math.ceil(self.act * m.top_k * m.capacity_factor / (self.spec.layout.tp if self.sp else 1))
        self.coll(f"{prefix}.{op.name}.all_to_all", CommType.ALL_TO_ALL, size, "ep")

    def forward_ops(self, prefix: str, ops: tuple[_Op, ...]) -> None:
        for op in ops:
            if op.kind == "comp":
                self.comp(f"{prefix}.{op.name}", op.flops, op.nbytes)
            elif op.kind == "a2a":
                self.a2a(prefix, op)
            else:
                self.tp_coll(prefix, op, backward=False)

    def backward_ops(self, prefix: str, ops: tuple[_Op, ...], reduce_grads: bool) -> None:
        for op in reversed(ops):
            if op.kind == "comp":
                node = self.comp(f"{prefix}.{op.name}", 2 * op.flops, 2 * op.nbytes)
                if reduce_grads and op.params:
                    self.grad_ready(op, node)
            elif op.kind == "a2a":
                self.a2a(prefix, op)
            else:
                self.tp_coll(prefix, op, backward=True)

    def run_blocks(self, prefix: str, blocks: list[_Block], emit) -> None:  # noqa: ANN001 - emit(block)
        """Run ``emit`` per block; under ZeRO-3 first all-gather each block's parameter shards.

        The gather of a block waits for the previous gather and for the block before it to start (the
        compute node before that block), so parameters are prefetched one block ahead and no further,
        across pass boundaries too.
        """
        for block in blocks:
            if self.spec.layout.zero == 3:
                self.gather_chain = self.gather_params(f"{prefix}.{block.name}", block,
                                                       self.gather_chain[-1:] + self.gather_anchor)
            self.gather_anchor = self.chain_deps()[:1]
            emit(block)

    def gather_params(self, prefix: str, block: _Block, deps: list[int]) -> list[int]:
        gathered: list[int] = []
        beta = self.spec.train.act_bytes
        for kind, params in (("dp", block.dense_params), (self._expert_group(), block.expert_params)):
            if params and self.has[kind]:
                size = math.ceil(params / self._group_size(kind)) * beta
                gathered.append(self.coll(f"{prefix}.param_all_gather", CommType.ALL_GATHER, size, kind,
                                          deps=list(dict.fromkeys(deps + gathered[-1:]))))
        self.waits += gathered
        return gathered or deps[:1]

    def forward(self, mb: int) -> None:
        layout = self.spec.layout
        size = self.act // layout.tp if self.sp else self.act
        if self.stage > 0:
            self.waits.append(self.tpl.recv(f"recv_act.mb{mb}", size, src=Param("prev"), dst=Param("self"), tag=mb))
        self.run_blocks(f"fwd.mb{mb}", self.blocks,
                        lambda block: self.forward_ops(f"fwd.mb{mb}.{block.name}", block.ops))
        if self.stage < layout.pp - 1:
            self.tpl.send(f"send_act.mb{mb}", size, src=Param("self"), dst=Param("next"), tag=mb,
                          deps=self.chain_deps())

    def backward(self, mb: int, last: bool) -> None:
        layout, m = self.spec.layout, self.spec.train.microbatches
        size = self.act // layout.tp if self.sp else self.act
        if self.stage < layout.pp - 1:
            self.waits.append(self.tpl.recv(f"recv_grad.mb{mb}", size, src=Param("next"), dst=Param("self"),
                                            tag=m + mb))

        def emit(block: _Block) -> None:
            if block.is_layer and layout.recompute == "full":
                self.forward_ops(f"recompute.mb{mb}.{block.name}", block.ops)
            elif block.is_layer and layout.recompute == "selective":
                core = next(op for op in block.ops if op.name == "attn_core")
                self.comp(f"recompute.mb{mb}.{block.name}.attn_core", core.flops, core.nbytes)
            self.backward_ops(f"bwd.mb{mb}.{block.name}", block.ops, reduce_grads=last)

        self.run_blocks(f"bwd.mb{mb}", self.blocks[::-1], emit)
        if last:
            for kind in ("dp", "edp"):
                self.close_bucket(kind, self.buckets[kind].flush())
        if self.stage > 0:
            self.tpl.send(f"send_grad.mb{mb}", size, src=Param("self"), dst=Param("prev"), tag=m + mb,
                          deps=self.chain_deps())

    # -- gradient synchronisation and the optimizer --

    def _expert_group(self) -> str:
        return "edp" if self.spec.layout.ep > 1 else "dp"

    def _group_size(self, kind: str) -> int:
        layout = self.spec.layout
        return {"dp": layout.dp, "edp": layout.dp // layout.ep, "tp": layout.tp, "ep": layout.ep}[kind]

    def grad_ready(self, op: _Op, node: int) -> None:
        kind = self._expert_group() if op.expert else "dp"
        if self.has[kind]:
            self.close_bucket(kind, self.buckets[kind].add(op.params, node))

    def close_bucket(self, kind: str, bucket: tuple[int, int] | None) -> None:
        """Reduce a full bucket over ``kind`` as soon as its last gradient exists (overlapping backward)."""
        if bucket is None:
            return
        params, producer = bucket
        comm = CommType.ALL_REDUCE if self.spec.layout.zero == 0 else CommType.REDUCE_SCATTER
        index = len(self.reduced)
        self.grad_colls.append(self.coll(f"grad_{_COMM_NAMES[comm]}.bucket{index}", comm,
                                         params * self.spec.train.grad_bytes, kind, deps=[producer]))
        self.reduced.append((kind, params))

    def local_params(self) -> int:
        """Parameters whose optimizer state this rank updates."""
        sharded = self.spec.layout.zero >= 1
        dense = sum(b.dense_params for b in self.blocks)
        expert = sum(b.expert_params for b in self.blocks)
        if sharded:
            dense = math.ceil(dense / self._group_size("dp"))
            expert = math.ceil(expert / self._group_size(self._expert_group()))
        return dense + expert

    def optimizer(self) -> None:
        layout, train = self.spec.layout, self.spec.train
        deps = list(self.grad_colls)
        if self.has["emb"] and self.spec.model.tied_embeddings:
            shared = self.spec.vocab_padded * self.spec.model.hidden // layout.tp
            deps.append(self.coll("embedding_grad_all_reduce", CommType.ALL_REDUCE, shared * train.grad_bytes,
                                  "emb", deps=[self.last_comp]))  # type: ignore[list-item]  # set by backward
        self.waits += deps
        params = self.local_params()
        opt = self.comp("optimizer", ADAM_FLOPS_PER_PARAM * params, ADAM_BYTES_PER_PARAM * params)
        if layout.zero in (1, 2):
            for index, (kind, bucket_params) in enumerate(self.reduced):
                size = math.ceil(bucket_params / self._group_size(kind)) * train.act_bytes
                self.coll(f"param_all_gather.bucket{index}", CommType.ALL_GATHER, size, kind, deps=[opt])

    def build(self) -> TraceTemplate:
        last_mb = self.spec.train.microbatches - 1
        for direction, mb in pipeline_order(self.stage, self.spec.layout.pp, self.spec.train.microbatches,
                                            self.spec.layout.schedule):
            if direction == "F":
                self.forward(mb)
            else:
                self.backward(mb, last=mb == last_mb)
        self.optimizer()
        return self.tpl


def build_stage_template(spec: LlmSpec, stage: int, groups: GroupTable | None = None) -> TraceTemplate:
    """The encoded graph of one pipeline stage (every rank of the stage shares it)."""
    groups = groups or LlmJob(spec).group_table
    meta = synthetic_metadata("etkit.generate.llm", model=spec.model.name, stage=stage,
                              layout=_layout_text(spec.layout), device=spec.device.name)
    return _StageBuilder(spec, stage, groups, TraceTemplate(meta)).build()


def _layout_text(layout: ParallelLayout) -> str:
    parts = [f"dp{layout.dp}", f"tp{layout.tp}", f"pp{layout.pp}"]
    if layout.ep > 1:
        parts.append(f"ep{layout.ep}")
    if layout.sequence_parallel:
        parts.append("sp")
    if layout.zero:
        parts.append(f"zero{layout.zero}")
    if layout.recompute != "none":
        parts.append(f"recompute-{layout.recompute}")
    parts.append(layout.schedule)
    return "-".join(parts)


# -- the job -------------------------------------------------------------------------------------

class LlmJob(GeneratedJob):
    """A generated LLM training step: one template per pipeline stage (role ``stage<k>``), stamped per rank.

    ``write(prefix)`` streams the ranks; ``trace(rank)`` / ``to_job()`` materialise them; ``summary()``
    totals nodes, FLOPs and bytes.
    """

    def __init__(self, spec: LlmSpec) -> None:
        super().__init__()
        self.spec = spec
        self.world_size = spec.layout.world_size
        kinds = ["tp", "dp"] + (["ep", "edp"] if spec.model.is_moe else [])
        self.group_table = build_groups(spec.layout, kinds + (["emb"] if spec.model.tied_embeddings else []))
        self.groups = self.group_table.groups

    def roles(self) -> list[str]:
        return [f"stage{stage}" for stage in range(self.spec.layout.pp)]

    def build_template(self, role: str) -> TraceTemplate:
        return build_stage_template(self.spec, int(role.removeprefix("stage")), self.group_table)

    def plan(self, rank: int) -> RankPlan:
        """The role and stamped values of ``rank``: its group names and its pipeline neighbours."""
        layout, table = self.spec.layout, self.group_table
        stage = layout.coords(rank).pp
        width = layout.tp * layout.dp
        params: dict[str, int | str] = {kind: table.name(kind, rank) for kind in table.names}
        params["self"] = rank
        if stage > 0:
            params["prev"] = rank - width
        if stage < layout.pp - 1:
            params["next"] = rank + width
        return RankPlan(rank, f"stage{stage}", params)


def llm(model: str | ModelConfig = "llama3-8b", *, dp: int = 1, tp: int = 1, pp: int = 1, ep: int = 1,
        sequence_parallel: bool = False, zero: int = 0, fsdp: bool = False, recompute: str = "none",
        schedule: str = "1f1b", bucket_mb: float = 25.0, micro_batch: int = 1, microbatches: int | None = None,
        global_batch: int | None = None, dtype: str = "bf16", grad_dtype: str = "fp32",
        device: str | Device = "H100", efficiency: float | None = None, **model_fields: object) -> LlmJob:
    """A synthetic LLM training step of ``model`` (a preset name or :class:`ModelConfig`).

    ``model_fields`` override the preset (``layers=4``, ``seq_len=2048``, ...). The number of
    micro-batches is ``microbatches``, else ``global_batch / (micro_batch * dp)``, else 8. ``fsdp`` is
    ZeRO-3.
    """
    config = get_model(model, **model_fields)
    if global_batch is not None:
        if microbatches is not None:
            raise UsageError("give either the number of micro-batches or the global batch, not both")
        if global_batch % (micro_batch * dp):
            raise UsageError(f"global batch {global_batch} is not a multiple of micro-batch {micro_batch} x dp {dp}")
        microbatches = global_batch // (micro_batch * dp)
    layout = ParallelLayout(dp=dp, tp=tp, pp=pp, ep=ep, sequence_parallel=sequence_parallel,
                            zero=3 if fsdp else zero, recompute=recompute, schedule=schedule, bucket_mb=bucket_mb)
    train = TrainConfig(micro_batch=micro_batch, microbatches=8 if microbatches is None else microbatches,
                        dtype=dtype, grad_dtype=grad_dtype)
    return LlmJob(LlmSpec(config, train, layout, get_device(device, efficiency)))


def write_llm(prefix: str | os.PathLike[str], *, executor: Executor | None = None, quiet: bool = True,
              **kwargs: object) -> JobSummary:
    """Generate ``llm(**kwargs)``, write it under ``prefix`` (see :meth:`GeneratedJob.write`), return its summary."""
    job = llm(**kwargs)  # type: ignore[arg-type]
    job.write(prefix, executor=executor, quiet=quiet)
    return job.summary()
