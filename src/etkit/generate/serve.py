"""Synthetic LLM serving runs: continuous batching, prefill and decode, colocated or disaggregated.

``llm_serve(model, tp=, requests=...)`` returns a :class:`ServeJob` whose ranks are the GPUs of one or more
serving *instances* (engines), each ``tp * pp`` GPUs. The generator runs the engine's scheduler the way
vLLM does (iteration-level batching):

- every engine step first schedules one decode token for each running request, then continues the
  prefill of running requests whose prompt did not fit in one step (chunked prefill), then admits waiting
  requests in arrival order while the step has token budget (``max_batch_tokens``), fewer than
  ``max_running`` requests run and the KV cache has room for their prompt chunk;
- the KV cache holds ``kv_cache_frac`` of the device memory minus the weights, in blocks of
  ``block_size`` tokens; when a running request needs a block and none is free, the most recently
  admitted request is preempted (its blocks freed; it is recomputed from its prompt and the tokens it had
  generated when it is admitted again);
- a step's work is the roofline cost of its tokens on the device (:func:`step_cost`: linear layers
  ``2 * tokens * params``, attention over each token's context, weights and KV cache read once per step)
  plus the tensor-parallel all-reduces (two per layer), expert all-to-alls (two per MoE layer) and the
  pipeline send of activations between stages.

Disaggregated serving (DistServe, Splitwise: ``prefill_instances`` + ``decode_instances``): prefill
instances only prefill; when a request's prompt is done (its first token produced) its KV cache goes to
the decode instance with the fewest requests, as one send/recv per GPU (stage and tensor-parallel index
alike on both sides) of ``tokens * 2 * layers_of_the_stage * kv_heads_per_gpu * head_dim * dtype bytes``,
once the decode instance has reserved the blocks; the decode instance admits the request when the transfer
is done.

What the ETs hold, per instance: a CPU chain of arrival nodes (``serve.arrive``, ``is_cpu_op``, each lasting
the gap since the previous arrival, so the chain ends each node at its request's arrival time however the
GPUs are doing), and per engine step and pipeline stage, the step's compute nodes (one per
``layers_per_node`` layers, default the whole stage) each followed by its collectives; a step waits for the
previous step, for the arrival of the requests it admits and, on later stages, for the activations of the
previous stage. Attributes name the requests: ``serve_step`` on every step node, and on the last node of the
last stage (where tokens come out) ``serve_batch`` (every request in the step), ``serve_first`` (requests
whose first token it produces) and ``serve_done`` (requests it completes); arrival nodes carry ``serve_request``,
``serve_prompt`` and ``serve_output``. :mod:`etkit.analyze.serving` turns any schedule of these ETs (a
simulation's) into TTFT, TPOT, latency, throughput and goodput.

The generator needs a step's time to decide which requests the next step sees; it takes compute from
the device roofline (exactly what the ETs say) and communication from ``comm_ns`` (a function of collective
kind, bytes and group size; the CLI passes the simulator's cost for the chosen network, the default is an
NVLink-class alpha-beta estimate), so that a simulation on the same system reproduces the generator's
clock and the batches it formed.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import field

import orjson

from ..errors import UsageError
from ..format.schema import CommType, NodeType
from ..model.devices import Device, get_device
from ..model.groups import ProcessGroups
from ..model.template import Param, RankPlan, TraceTemplate, Value, synthetic_metadata
from ..records import record
from .llm import ModelConfig, get_model
from .requests import Request, RequestSource
from .training import DTYPE_BYTES, GeneratedJob

__all__ = ["ServeLayout", "EngineConfig", "ServeSpec", "StepShape", "StepCost", "ServeJob", "SERVE_PRESETS",
           "CommCost", "alpha_beta_comm", "step_cost", "kv_bytes_per_token", "weight_bytes_per_gpu",
           "kv_capacity_tokens", "token_bytes", "llm_serve", "llm_serve_from_settings", "settings_of"]

#: A communication cost estimate: ``(kind, bytes, ranks) -> ns``; kind "all_reduce" or "all_to_all" over
#: ``ranks``, or "p2p" from ``ranks[0]`` to ``ranks[1]`` (:func:`etkit.simulate.probe.comm_cost` makes one).
CommCost = Callable[[str, int, tuple[int, ...]], float]

#: Tags of pipeline activation sends start here (KV-cache transfers use the request number as their tag).
_PP_TAG_BASE = 1 << 30

#: Serving presets: model, tensor parallelism and device (network presets of ``etkit simulate`` alike).
SERVE_PRESETS: dict[str, dict[str, object]] = {
    "llama3-8b-h100": {"model": "llama3-8b", "tp": 1, "device": "H100", "system": "hgx-h100"},
    "llama3-8b-h200": {"model": "llama3-8b", "tp": 1, "device": "H200", "system": "hgx-h200"},
    "llama3-70b-h100": {"model": "llama3-70b", "tp": 8, "device": "H100", "system": "hgx-h100"},
    "llama3-70b-h200": {"model": "llama3-70b", "tp": 4, "device": "H200", "system": "hgx-h200"},
    "mixtral-8x7b-h100": {"model": "mixtral-8x7b", "tp": 2, "ep": 2, "device": "H100", "system": "hgx-h100"},
    "mixtral-8x7b-h200": {"model": "mixtral-8x7b", "tp": 2, "ep": 2, "device": "H200", "system": "hgx-h200"},
}


@record(frozen=True)
class ServeLayout:
    """GPUs of a serving run: instances of ``tp * pp`` GPUs; ``ep`` divides ``tp`` (experts over TP ranks).

    Colocated: ``instances`` engines that prefill and decode. Disaggregated: ``prefill`` prefill-only and
    ``decode`` decode-only engines. Ranks: ``instance * tp * pp + stage * tp + tp_index``, prefill
    instances first.
    """

    tp: int = 1
    pp: int = 1
    ep: int = 1
    instances: int = 1
    prefill: int = 0
    decode: int = 0

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "instances"):
            if getattr(self, name) < 1:
                raise UsageError(f"serving layout: {name} must be >= 1, got {getattr(self, name)}")
        if self.tp % self.ep:
            raise UsageError(f"serving layout: expert parallel {self.ep} must divide tensor parallel {self.tp}")
        if (self.prefill > 0) != (self.decode > 0) or self.prefill < 0 or self.decode < 0:
            raise UsageError("serving layout: disaggregated serving needs at least one prefill and one decode instance")

    @property
    def disaggregated(self) -> bool:
        return self.prefill > 0

    @property
    def gpus_per_instance(self) -> int:
        return self.tp * self.pp

    @property
    def count(self) -> int:
        """Number of instances."""
        return self.prefill + self.decode if self.disaggregated else self.instances

    @property
    def world_size(self) -> int:
        return self.count * self.gpus_per_instance

    def role(self, instance: int) -> str:
        """"prefill", "decode" or "serve" (colocated)."""
        if not self.disaggregated:
            return "serve"
        return "prefill" if instance < self.prefill else "decode"

    def rank(self, instance: int, stage: int, tp_index: int) -> int:
        return instance * self.gpus_per_instance + stage * self.tp + tp_index

    def coords(self, rank: int) -> tuple[int, int, int]:
        """``(instance, stage, tp_index)`` of ``rank``."""
        instance, rest = divmod(rank, self.gpus_per_instance)
        stage, tp_index = divmod(rest, self.tp)
        return instance, stage, tp_index


@record(frozen=True)
class EngineConfig:
    """The serving engine's scheduler limits (vLLM's names in brackets).

    ``max_batch_tokens`` tokens per step [max_num_batched_tokens], ``max_running`` requests [max_num_seqs],
    ``kv_cache_frac`` of device memory for weights + KV cache [gpu_memory_utilization], KV blocks of
    ``block_size`` tokens, ``dtype`` of weights, activations and KV cache, ``layers_per_node`` layers per
    compute node (0: a pipeline stage's layers in one node per step; smaller values give more, finer nodes).
    """

    max_batch_tokens: int = 8192
    max_running: int = 256
    kv_cache_frac: float = 0.9
    block_size: int = 16
    dtype: str = "bf16"
    layers_per_node: int = 0

    def __post_init__(self) -> None:
        if self.max_batch_tokens < 1 or self.max_running < 1 or self.block_size < 1 or self.layers_per_node < 0:
            raise UsageError("engine: max batch tokens, max running requests and block size must be >= 1")
        if self.max_running > self.max_batch_tokens:
            raise UsageError(f"engine: max running requests {self.max_running} exceeds the step's token budget "
                             f"{self.max_batch_tokens} (every running request decodes one token per step)")
        if not 0 < self.kv_cache_frac <= 1:
            raise UsageError(f"engine: KV-cache fraction must be in (0, 1], got {self.kv_cache_frac}")
        if self.dtype not in DTYPE_BYTES:
            raise UsageError(f"engine: dtype must be one of {', '.join(DTYPE_BYTES)}")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


@record(frozen=True)
class StepShape:
    """The tokens of one engine step: ``decode`` tokens whose requests hold ``decode_context`` tokens of KV
    cache in all before them, prefill ``chunks`` as ``(new tokens, tokens already cached)``, and ``logits``
    tokens that need the output head (every decode token and the last token of each finished prefill)."""

    decode: int = 0
    decode_context: int = 0
    chunks: tuple[tuple[int, int], ...] = ()
    logits: int = 0

    @property
    def tokens(self) -> int:
        return self.decode + sum(c for c, _ in self.chunks)

    @property
    def attended(self) -> int:
        """Sum over the step's tokens of the number of tokens each attends to (itself included)."""
        prefill = sum(c * k + c * (c + 1) // 2 for c, k in self.chunks)
        return self.decode_context + self.decode + prefill

    @property
    def kv_read(self) -> int:
        """KV-cache tokens the step reads (every request's whole context, new tokens included)."""
        return self.decode_context + self.decode + sum(c + k for c, k in self.chunks)


@record(frozen=True)
class StepCost:
    """One GPU's share of one layer (``layer_*``) and of the output head (``head_*``) for a step."""

    layer_flops: int
    layer_bytes: int
    head_flops: int
    head_bytes: int
    embed_bytes: int
    allreduce_bytes: int  # per layer (two all-reduces of this size when tp > 1)
    alltoall_bytes: int  # per MoE layer (dispatch and combine, each this size when ep > 1)
    activation_bytes: int  # what one pipeline stage sends the next


def _kv_heads_per_gpu(model: ModelConfig, tp: int) -> int:
    return max(model.kv_heads // tp, 1)  # tp beyond the KV heads replicates them


def kv_bytes_per_token(model: ModelConfig, tp: int, dtype_bytes: int) -> int:
    """KV-cache bytes one token takes on one GPU, per layer (K and V)."""
    head_dim = model.hidden // model.heads
    return 2 * _kv_heads_per_gpu(model, tp) * head_dim * dtype_bytes


def _layer_params(model: ModelConfig) -> tuple[int, int]:
    """(attention parameters, parameters of one FFN expert) of one layer."""
    attention = model.hidden * (model.hidden + 2 * model.kv_hidden) + model.hidden * model.hidden
    return attention, model.ffn_matrices * model.hidden * model.ffn


def weight_bytes_per_gpu(model: ModelConfig, layout: ServeLayout, dtype_bytes: int) -> int:
    """Weights one GPU holds: its stage's layers (all experts) and, on the first and last stage, the
    embedding and output head, each split over the tensor-parallel ranks."""
    attention, expert = _layer_params(model)
    layer = attention + model.experts * expert + (model.hidden * model.experts if model.is_moe else 0)
    per_stage = -(-model.layers // layout.pp)
    embedding = model.vocab * model.hidden * (1 if model.tied_embeddings else 2) if layout.pp == 1 else model.vocab * model.hidden
    return (per_stage * layer + embedding) * dtype_bytes // layout.tp


def kv_capacity_tokens(model: ModelConfig, layout: ServeLayout, engine: EngineConfig, device: Device) -> int:
    """Tokens the KV cache of one instance holds (every GPU holds its layers' share of each token)."""
    free = engine.kv_cache_frac * device.memory_bytes - weight_bytes_per_gpu(model, layout, engine.dtype_bytes)
    per_token = kv_bytes_per_token(model, layout.tp, engine.dtype_bytes) * -(-model.layers // layout.pp)
    tokens = int(free // per_token) if free > 0 else 0
    blocks = tokens // engine.block_size
    if blocks < 1:
        raise UsageError(f"{model.name} on {device.name} (tp {layout.tp}, pp {layout.pp}): the weights leave no room "
                         f"for a KV cache in {engine.kv_cache_frac:g} of {device.memory_gb:g} GB")
    return blocks * engine.block_size


def step_cost(model: ModelConfig, layout: ServeLayout, engine: EngineConfig, shape: StepShape) -> StepCost:
    """FLOPs and bytes of one step on one GPU (see the module docstring for what is counted)."""
    b, t = engine.dtype_bytes, layout.tp
    tokens = shape.tokens
    attention, expert = _layer_params(model)
    if model.is_moe:
        touched = model.experts * (1.0 - (1.0 - model.top_k / model.experts) ** tokens)
        ffn_flops = 2 * tokens * model.top_k * expert
        ffn_weights = math.ceil(touched * expert) + model.hidden * model.experts
        ffn_act = 2 * tokens * model.top_k * model.ffn
    else:
        ffn_flops, ffn_weights, ffn_act = 2 * tokens * expert, expert, 2 * tokens * model.ffn
    layer_flops = (2 * tokens * attention + ffn_flops + 4 * model.hidden * shape.attended) // t
    kv = kv_bytes_per_token(model, t, b)
    activations = tokens * (4 * model.hidden + 2 * model.kv_hidden) + ffn_act
    layer_bytes = (attention + ffn_weights + activations) * b // t + kv * shape.kv_read
    head_flops = 2 * shape.logits * model.hidden * model.vocab // t
    head_bytes = model.hidden * model.vocab * b // t + shape.logits * model.vocab * 4 // t
    return StepCost(int(layer_flops), int(layer_bytes), int(head_flops), int(head_bytes), tokens * model.hidden * b,
                    tokens * model.hidden * b if t > 1 else 0,
                    tokens * model.top_k * model.hidden * b if (layout.ep > 1 and model.is_moe) else 0,
                    tokens * model.hidden * b)


def alpha_beta_comm(bandwidth_gbps: float = 450.0, latency_ns: float = 700.0) -> CommCost:
    """A ring/direct alpha-beta estimate on one switch of ``bandwidth_gbps`` per GPU and ``latency_ns`` per step."""
    per_ns = bandwidth_gbps  # GB/s = bytes/ns

    def cost(kind: str, nbytes: int, ranks: tuple[int, ...]) -> float:
        group = len(ranks)
        if group <= 1 or nbytes <= 0:
            return 0.0
        if kind == "all_reduce":
            return 2 * (group - 1) * (latency_ns + nbytes / group / per_ns)
        if kind == "all_to_all":
            return latency_ns + nbytes * (group - 1) / group / per_ns
        return latency_ns + nbytes / per_ns

    return cost


@record(frozen=True)
class ServeSpec:
    """Everything that defines a serving run."""

    model: ModelConfig
    layout: ServeLayout
    engine: EngineConfig
    device: Device
    requests: tuple[Request, ...]

    def __post_init__(self) -> None:
        m, t = self.model, self.layout.tp
        if m.heads % t or m.hidden % t or m.ffn % t:
            raise UsageError(f"tensor parallel {t} must divide heads {m.heads}, hidden {m.hidden} and FFN {m.ffn}")
        if self.layout.pp > m.layers:
            raise UsageError(f"pipeline parallel {self.layout.pp} exceeds {m.layers} layers")
        if self.layout.ep > 1 and not m.is_moe:
            raise UsageError(f"expert parallel {self.layout.ep} needs an MoE model")
        if not self.requests:
            raise UsageError("a serving run needs at least one request")

    def stage_layers(self, stage: int) -> int:
        per, extra = divmod(self.model.layers, self.layout.pp)
        return per + (1 if stage < extra else 0)

    def layer_groups(self, stage: int) -> list[int]:
        """Layers of each compute node of ``stage`` in one step."""
        n = self.stage_layers(stage)
        per = self.engine.layers_per_node or n
        return [min(per, n - i) for i in range(0, n, per)]


# -- the scheduler ---------------------------------------------------------------------------------

@record(eq=False)
class _Seq:
    """A request inside an instance. Blocks held are always ``ceil(computed / block_size)``."""

    req: Request
    target: int  # tokens to prefill (prompt, plus generated tokens after a preemption)
    computed: int = 0  # tokens whose KV is cached
    generated: int = 0
    first_done: bool = False
    # decode bookkeeping: values when the request joined the decode set, at the instance's decode-step count
    join_step: int = 0
    join_computed: int = 0
    join_generated: int = 0
    epoch: int = 0  # bumped when the request leaves the decode set (stale finish entries are skipped)


#: Per pipeline stage: (stage, [(flops, bytes, µs, all-reduce bytes, all-to-all bytes) per compute node], send bytes).
StagePlan = tuple[int, list[tuple[int, int, int, int, int]], int]


@record
class _StepRecord:
    """One engine step of one instance, as the generator saw it."""

    index: int
    start_ns: float
    end_ns: float
    shape: StepShape
    stages: list[StagePlan]
    batch: list[int]
    admitted: list[int]  # requests whose prefill this step starts (the step waits for their arrival)
    received: list[int]  # decode side of disaggregated serving: requests whose KV this step first uses
    first: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)


@record
class _Transfer:
    """A KV-cache transfer from a prefill instance to a decode instance (disaggregated serving)."""

    request: int
    src: int
    dst: int
    tokens: int
    after_prefill_step: int  # index of the prefill step that produced the first token
    after_decode_step: int = -1  # the decode step whose end freed the blocks (-1: they were free at once)
    done_ns: float = math.inf  # inf until the decode instance reserved the blocks


class _Instance:
    """One engine's scheduler state (continuous batching with chunked prefill and recompute preemption).

    The decode set is kept as aggregates so that a step costs O(requests that change), not O(batch):
    every decode request gains one token per step, so its KV length modulo the block size, shifted by
    the step count, is constant; ``phase`` counts requests per such class (those that cross a block
    boundary this step), and ``finish_at`` lists requests by the decode step that completes them.
    """

    def __init__(self, number: int, role: str, engine: EngineConfig, capacity_tokens: int) -> None:
        self.number, self.role, self.engine = number, role, engine
        self.bs = engine.block_size
        self.free_blocks = capacity_tokens // self.bs
        self.waiting: deque[_Seq] = deque()
        self.running: OrderedDict[int, _Seq] = OrderedDict()  # admission order
        self.prefilling: OrderedDict[int, _Seq] = OrderedDict()
        self.decoding: dict[int, _Seq] = {}
        self.decode_steps = 0
        self.decode_context = 0  # KV tokens of the decode set before this step's token
        self.phase: list[int] = [0] * self.bs
        self.finish_at: dict[int, list[tuple[_Seq, int]]] = {}
        self.steps: list[_StepRecord] = []
        self.assigned = 0  # requests dispatched here and not finished (load balancing)

    def blocks(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    # -- the decode set --------------------------------------------------------------------------

    def _join_decode(self, seq: _Seq) -> None:
        seq.join_step, seq.join_computed, seq.join_generated = self.decode_steps, seq.computed, seq.generated
        self.decoding[seq.req.id] = seq
        self.decode_context += seq.computed
        self.phase[(seq.computed - self.decode_steps) % self.bs] += 1
        finish = self.decode_steps + (seq.req.output - seq.generated)
        self.finish_at.setdefault(finish, []).append((seq, seq.epoch))

    def _leave_decode(self, seq: _Seq) -> None:
        if self.decoding.pop(seq.req.id, None) is None:
            return
        ran = self.decode_steps - seq.join_step
        seq.computed, seq.generated = seq.join_computed + ran, seq.join_generated + ran
        self.decode_context -= seq.computed
        self.phase[(seq.join_computed - seq.join_step) % self.bs] -= 1
        seq.epoch += 1

    def _release(self, seq: _Seq) -> None:
        self.running.pop(seq.req.id, None)
        self.prefilling.pop(seq.req.id, None)
        self.free_blocks += self.blocks(seq.computed)

    def _preempt_last(self) -> None:
        """Preempt the most recently admitted running request (vLLM's recompute preemption)."""
        seq = next(reversed(self.running.values()))
        self._leave_decode(seq)
        self._release(seq)
        seq.target, seq.computed = seq.req.prompt + seq.generated, 0
        self.waiting.appendleft(seq)

    # -- one step ----------------------------------------------------------------------------------

    def schedule(self) -> tuple[StepShape, list[_Seq], list[tuple[_Seq, int]], list[_Seq]] | None:
        """Form the next step: (shape, decode requests, prefill chunks, newly admitted)."""
        budget = self.engine.max_batch_tokens
        # 1. a decode token for every running decode request; preempt from the tail while blocks are short
        while self.decoding:
            needed = self.phase[(-self.decode_steps) % self.bs]
            if needed <= self.free_blocks:
                self.free_blocks -= needed
                break
            self._preempt_last()
        decodes = list(self.decoding.values())
        budget -= len(decodes)
        chunks: list[tuple[_Seq, int]] = []
        # 2. running requests still prefilling (a chunk that finds no free block waits)
        for seq in self.prefilling.values():
            if budget <= 0:
                break
            chunk = min(seq.target - seq.computed, budget)
            need = self.blocks(seq.computed + chunk) - self.blocks(seq.computed)
            if need <= self.free_blocks:
                self.free_blocks -= need
                chunks.append((seq, chunk))
                budget -= chunk
        # 3. admit waiting requests in order while budget, slots and blocks last (no preemption for them)
        admitted: list[_Seq] = []
        while self.waiting and budget > 0 and len(self.running) < self.engine.max_running:
            seq = self.waiting[0]
            if seq.computed < seq.target:
                chunk = min(seq.target - seq.computed, budget)
                need = self.blocks(seq.computed + chunk) - self.blocks(seq.computed)
            else:  # a transferred request (disaggregated decode): its KV is here, it decodes at once
                chunk, need = 0, (1 if seq.computed % self.bs == 0 else 0)
            if need > self.free_blocks:
                break
            self.waiting.popleft()
            self.free_blocks -= need
            self.running[seq.req.id] = seq
            if chunk:
                self.prefilling[seq.req.id] = seq
                chunks.append((seq, chunk))
                budget -= chunk
            else:
                self._join_decode(seq)
                decodes.append(seq)
                budget -= 1
            admitted.append(seq)
        if not decodes and not chunks:
            return None
        finishing = sum(1 for seq, chunk in chunks if seq.computed + chunk >= seq.target)
        shape = StepShape(len(decodes), self.decode_context, tuple((c, s.computed) for s, c in chunks),
                          len(decodes) + finishing)
        return shape, decodes, chunks, admitted

    def advance(self, decoded: bool, chunks: list[tuple[_Seq, int]]) -> tuple[list[int], list[_Seq], list[_Seq]]:
        """Apply a finished step: returns (first-token request ids, finished requests, finished prefills
        of a prefill-only instance)."""
        first: list[int] = []
        finished: list[_Seq] = []
        prefilled: list[_Seq] = []
        if decoded:
            self.decode_context += len(self.decoding)
            self.decode_steps += 1
            for seq, epoch in self.finish_at.pop(self.decode_steps, ()):
                if seq.epoch == epoch and seq.req.id in self.decoding:
                    self._leave_decode(seq)
                    finished.append(seq)
        for seq, chunk in chunks:
            seq.computed += chunk
            if seq.computed < seq.target:
                continue
            self.prefilling.pop(seq.req.id, None)
            seq.generated += 1
            if not seq.first_done:
                seq.first_done = True
                first.append(seq.req.id)
            if self.role == "prefill":
                prefilled.append(seq)
            elif seq.generated >= seq.req.output:
                finished.append(seq)
            else:
                self._join_decode(seq)
        for seq in finished + prefilled:
            self._release(seq)
            self.assigned -= 1
        return first, finished, prefilled


class _Scheduler:
    """Runs every instance's engine over the requests on the generator's clock (ns)."""

    def __init__(self, spec: ServeSpec, comm_ns: CommCost) -> None:
        self.spec, self.comm_ns = spec, comm_ns
        layout = spec.layout
        self.capacity = kv_capacity_tokens(spec.model, layout, spec.engine, spec.device)
        self.instances = [_Instance(i, layout.role(i), spec.engine, self.capacity) for i in range(layout.count)]
        self.arrivals: dict[int, list[Request]] = {i: [] for i in range(layout.count)}
        self.transfers: list[_Transfer] = []
        self.inbound: dict[int, list[tuple[_Seq, _Transfer]]] = {i: [] for i in range(layout.count)}
        self.kv_per_token = kv_bytes_per_token(spec.model, layout.tp, spec.engine.dtype_bytes)
        self._busy: dict[int, tuple[_StepRecord, bool, list[tuple[_Seq, int]]]] = {}
        self._events: list[tuple[float, int, int]] = []
        self._seqno = 0
        # the groups the cost estimates use: instance 0's (every instance is laid out alike)
        self._tp_ranks = [tuple(layout.rank(0, s, t) for t in range(layout.tp)) for s in range(layout.pp)]
        self._ep_ranks = [tuple(layout.rank(0, s, t) for t in range(layout.ep)) for s in range(layout.pp)]
        self._check_fits()

    def _check_fits(self) -> None:
        longest = max(self.spec.requests, key=lambda r: r.prompt + r.output)
        if longest.prompt + longest.output > self.capacity:
            raise UsageError(f"request {longest.id} ({longest.prompt} prompt + {longest.output} output tokens) does "
                             f"not fit in one instance's KV cache of {self.capacity:,} tokens")

    def entry_instances(self) -> list[_Instance]:
        layout = self.spec.layout
        return self.instances[:layout.prefill] if layout.disaggregated else self.instances

    def decode_instances(self) -> list[_Instance]:
        return self.instances[self.spec.layout.prefill:]

    # -- costs -------------------------------------------------------------------------------------

    def step_time(self, shape: StepShape) -> tuple[float, list[StagePlan]]:
        """Estimated step time (ns) and what each stage's nodes do."""
        spec, layout = self.spec, self.spec.layout
        cost = step_cost(spec.model, layout, spec.engine, shape)
        total = 0.0
        stages: list[StagePlan] = []
        last = layout.pp - 1
        for stage in range(layout.pp):
            groups = spec.layer_groups(stage)
            nodes = []
            for j, layers in enumerate(groups):
                flops, nbytes = cost.layer_flops * layers, cost.layer_bytes * layers
                if stage == 0 and j == 0:
                    nbytes += cost.embed_bytes
                if stage == last and j == len(groups) - 1:
                    flops, nbytes = flops + cost.head_flops, nbytes + cost.head_bytes
                allreduce, alltoall = 2 * layers * cost.allreduce_bytes, 2 * layers * cost.alltoall_bytes
                micros = spec.device.duration_us(flops, nbytes)
                nodes.append((int(flops), int(nbytes), micros, allreduce, alltoall))
                total += 1000.0 * micros
                total += self.comm_ns("all_reduce", allreduce, self._tp_ranks[stage]) if allreduce else 0.0
                total += 2 * self.comm_ns("all_to_all", alltoall // 2, self._ep_ranks[stage]) if alltoall else 0.0
            send = cost.activation_bytes if stage < last else 0
            total += self.comm_ns("p2p", send, (layout.rank(0, stage, 0), layout.rank(0, stage + 1, 0))) if send else 0.0
            stages.append((stage, nodes, send))
        if layout.pp > 1:
            total += self.comm_ns("p2p", token_bytes(shape), (layout.rank(0, last, 0), layout.rank(0, 0, 0)))
        return total, stages

    # -- the event loop ----------------------------------------------------------------------------

    def run(self) -> None:
        pending = deque(sorted(self.spec.requests, key=lambda r: (r.arrival_us, r.id)))
        entries = self.entry_instances()
        while True:
            next_arrival = pending[0].arrival_us * 1000.0 if pending else math.inf
            next_step = self._events[0][0] if self._events else math.inf
            next_kv = min((t.done_ns for items in self.inbound.values() for _, t in items), default=math.inf)
            now = min(next_arrival, next_step, next_kv)
            if now == math.inf:
                break
            if next_arrival == now:
                while pending and pending[0].arrival_us * 1000.0 <= now:
                    req = pending.popleft()
                    inst = min(entries, key=lambda x: (x.assigned, x.number))
                    inst.assigned += 1
                    inst.waiting.append(_Seq(req, req.prompt))
                    self.arrivals[inst.number].append(req)
                for inst in entries:
                    self._start(inst, now)
            elif next_step == now:
                _, _, number = heapq.heappop(self._events)
                inst = self.instances[number]
                record, decoded, chunks = self._busy.pop(number)
                first, finished, prefilled = inst.advance(decoded, chunks)
                record.first, record.done = first, [s.req.id for s in finished]
                if prefilled:
                    self._hand_over(inst, record, prefilled)
                    for dec in self.decode_instances():
                        self._reserve(dec, now, -1)
                if inst.role == "decode":
                    self._reserve(inst, now, record.index)
                self._start(inst, now)
                for dec in self.decode_instances() if prefilled else ():
                    self._start(dec, now)
            else:
                for dec in self.decode_instances():
                    self._start(dec, now)
        if any(inst.has_work() for inst in self.instances) or any(self.inbound.values()):
            raise UsageError("the serving run could not place every request (KV cache too small for the load)")

    def _start(self, inst: _Instance, now: float) -> None:
        """Start the instance's next step at ``now`` unless it is busy or has nothing to do."""
        self._take_arrived(inst, now)
        if inst.number in self._busy:
            return
        formed = inst.schedule()
        if formed is None:
            return
        shape, decodes, chunks, admitted = formed
        duration, stages = self.step_time(shape)
        decode_side = inst.role == "decode"
        record = _StepRecord(len(inst.steps), now, now + duration, shape, stages,
                             [s.req.id for s in decodes] + [s.req.id for s, _ in chunks],
                             [] if decode_side else [s.req.id for s in admitted],
                             [s.req.id for s in admitted] if decode_side else [])
        inst.steps.append(record)
        self._busy[inst.number] = (record, bool(decodes), chunks)
        heapq.heappush(self._events, (record.end_ns, self._seqno, inst.number))
        self._seqno += 1

    def _hand_over(self, inst: _Instance, record: _StepRecord, prefilled: list[_Seq]) -> None:
        """Disaggregated: queue finished prefills for the decode instance with the fewest requests."""
        for seq in prefilled:
            if seq.generated >= seq.req.output:
                record.done.append(seq.req.id)
                continue
            dec = min(self.decode_instances(), key=lambda x: (x.assigned, x.number))
            dec.assigned += 1
            moved = _Seq(seq.req, seq.computed, computed=seq.computed, generated=seq.generated, first_done=True)
            self.inbound[dec.number].append((moved, _Transfer(seq.req.id, inst.number, dec.number, seq.computed,
                                                              record.index)))

    def _reserve(self, dec: _Instance, now: float, after_step: int) -> None:
        """Reserve decode blocks for queued transfers in order; each transfer starts once reserved."""
        for moved, transfer in self.inbound[dec.number]:
            if transfer.done_ns != math.inf:
                continue
            blocks = dec.blocks(moved.computed)
            if blocks > dec.free_blocks:
                break
            dec.free_blocks -= blocks
            transfer.after_decode_step = after_step
            pair = (self.spec.layout.rank(transfer.src, 0, 0), self.spec.layout.rank(transfer.dst, 0, 0))
            transfer.done_ns = now + self.comm_ns("p2p", self.kv_transfer_bytes(moved.computed), pair)
            self.transfers.append(transfer)

    def kv_transfer_bytes(self, tokens: int) -> int:
        """Bytes one GPU pair moves for ``tokens`` of KV cache (the stage with the most layers)."""
        return tokens * self.kv_per_token * max(self.spec.stage_layers(s) for s in range(self.spec.layout.pp))

    def _take_arrived(self, dec: _Instance, now: float) -> None:
        items = self.inbound[dec.number]
        if any(t.done_ns <= now for _, t in items):
            arrived = [m for m, t in items if t.done_ns <= now]
            self.inbound[dec.number] = [(m, t) for m, t in items if t.done_ns > now]
            dec.waiting.extend(arrived)


def token_bytes(shape: StepShape) -> int:
    """Bytes of the sampled token ids the last pipeline stage hands back to the first (8 per token)."""
    return 8 * max(shape.logits, 1)


# -- the job ---------------------------------------------------------------------------------------

class ServeJob(GeneratedJob):
    """A generated serving run: one template per (instance, pipeline stage), stamped per tensor-parallel rank.

    ``write(prefix)`` streams the ranks; ``trace(rank)`` / ``to_job()`` materialise them; ``summary()``
    totals nodes, FLOPs and bytes; :meth:`steps` are the engine steps the generator formed.
    """

    def __init__(self, spec: ServeSpec, comm_ns: CommCost | None = None, *,
                 settings: dict[str, object] | None = None) -> None:
        super().__init__()
        self.spec = spec
        #: how the run was made (:func:`llm_serve` arguments, JSON-able): kept in every rank's metadata so
        #: that :func:`llm_serve_from_settings` can regenerate it at another rate or split
        self.settings = settings
        self.world_size = spec.layout.world_size
        self.scheduler = _Scheduler(spec, comm_ns or alpha_beta_comm())
        self.scheduler.run()
        self.groups, self._tp_group, self._ep_group = self._build_groups()

    def _build_groups(self) -> tuple[ProcessGroups, dict[tuple[int, int], str], dict[tuple[int, int, int], str]]:
        """Tensor-parallel groups of every (instance, stage), then expert-parallel ones; names from "1"."""
        layout = self.spec.layout
        mapping: dict[str, list[int]] = {}
        tp_group: dict[tuple[int, int], str] = {}
        ep_group: dict[tuple[int, int, int], str] = {}
        positions = [(inst, stage) for inst in range(layout.count) for stage in range(layout.pp)]
        if layout.tp > 1:
            for inst, stage in positions:
                tp_group[(inst, stage)] = name = str(len(mapping) + 1)
                mapping[name] = [layout.rank(inst, stage, t) for t in range(layout.tp)]
        if layout.ep > 1 and self.spec.model.is_moe:
            for inst, stage in positions:
                for block in range(layout.tp // layout.ep):
                    ep_group[(inst, stage, block)] = name = str(len(mapping) + 1)
                    mapping[name] = [layout.rank(inst, stage, block * layout.ep + e) for e in range(layout.ep)]
        return ProcessGroups.from_mapping(mapping), tp_group, ep_group

    def roles(self) -> list[str]:
        layout = self.spec.layout
        return [f"i{inst}.s{stage}" for inst in range(layout.count) for stage in range(layout.pp)]

    def plan(self, rank: int) -> RankPlan:
        """The role and stamped values of ``rank``: its groups, pipeline neighbours and KV-transfer peers."""
        layout = self.spec.layout
        inst, stage, t = layout.coords(rank)
        params: dict[str, int | str | bool] = {"me": rank, "ep_group": self.ep_group(inst, stage, t // layout.ep),
                                               "next": layout.rank(inst, (stage + 1) % layout.pp, t),
                                               "prev": layout.rank(inst, (stage - 1) % layout.pp, t)}
        if layout.disaggregated:
            for other in range(layout.count):
                if layout.role(other) != layout.role(inst):
                    params[f"peer{other}"] = layout.rank(other, stage, t)
        return RankPlan(rank, f"i{inst}.s{stage}", params)

    def tp_group(self, instance: int, stage: int) -> str:
        return self._tp_group.get((instance, stage), "")

    def ep_group(self, instance: int, stage: int, block: int) -> str:
        return self._ep_group.get((instance, stage, block), "")

    def steps(self, instance: int) -> list[_StepRecord]:
        """The engine steps of ``instance`` in order, as the generator formed them."""
        return self.scheduler.instances[instance].steps

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens one instance's KV cache holds."""
        return self.scheduler.capacity

    def build_template(self, role: str) -> TraceTemplate:
        inst_part, stage_part = role.split(".")
        return _StageBuilder(self, int(inst_part[1:]), int(stage_part[1:])).build()


class _StageBuilder:
    """Builds the graph of one pipeline stage of one instance from the scheduler's steps."""

    def __init__(self, job: ServeJob, inst: int, stage: int) -> None:
        self.job, self.spec, self.inst, self.stage = job, job.spec, inst, stage
        self.sched = job.scheduler
        layout = self.spec.layout
        self.role = layout.role(inst)
        extra = {"serve_settings": orjson.dumps(job.settings).decode()} if job.settings else {}
        self.tpl = TraceTemplate(synthetic_metadata("etkit.generate.serve", workload="llm-serve",
                                                    model=self.spec.model.name, instance=inst, stage=stage,
                                                    instance_role=self.role, tp=layout.tp, pp=layout.pp, **extra))
        self.last_stage = layout.pp - 1
        # every rank of a template is in the same tensor-parallel group (a constant, not stamped per rank);
        # expert-parallel groups split it in blocks of ``ep`` ranks
        self.tp_group: Value = job.tp_group(inst, stage)
        self.ep_group: Value = Param("ep_group") if layout.tp > layout.ep else job.ep_group(inst, stage, 0)
        self.kv_stage = kv_bytes_per_token(self.spec.model, layout.tp, self.spec.engine.dtype_bytes) \
            * self.spec.stage_layers(stage)

    def build(self) -> TraceTemplate:
        arrivals = self._arrival_chain()
        sends_after: dict[int, list[_Transfer]] = {}
        recvs_after: dict[int, list[_Transfer]] = {}
        for t in self.sched.transfers:
            if t.src == self.inst:
                sends_after.setdefault(t.after_prefill_step, []).append(t)
            if t.dst == self.inst:
                recvs_after.setdefault(t.after_decode_step, []).append(t)
        recv_node = {t.request: self._kv(t, []) for t in recvs_after.get(-1, [])}
        previous: int | None = None
        for step in self.job.steps(self.inst):
            waits = [arrivals[r] for r in step.admitted if r in arrivals] if self.stage == 0 else []
            waits += [recv_node[r] for r in step.received]
            previous = self._step(step, previous, waits)
            for t in sends_after.get(step.index, []):
                self._kv(t, [previous])
            for t in recvs_after.get(step.index, []):
                recv_node[t.request] = self._kv(t, [previous])
        return self.tpl

    def _kv(self, t: _Transfer, deps: list[int]) -> int:
        """The send (prefill side) or recv (decode side) of request ``t.request``'s KV cache for this stage."""
        size = self.kv_stage * t.tokens
        if t.src == self.inst:
            return self.tpl.send(f"kv.r{t.request}", size, src=Param("me"), dst=Param(f"peer{t.dst}"), tag=t.request,
                                 deps=deps)
        return self.tpl.recv(f"kv.r{t.request}", size, src=Param(f"peer{t.src}"), dst=Param("me"), tag=t.request,
                             deps=deps)

    def _arrival_chain(self) -> dict[int, int]:
        """CPU nodes ending at each request's arrival (µs), in arrival order; request -> node id."""
        out: dict[int, int] = {}
        clock, prev = 0, None
        for req in self.sched.arrivals[self.inst]:
            node = self.tpl.node(f"serve.arrive.r{req.id}", NodeType.COMP_NODE, deps=[] if prev is None else [prev],
                                 duration=req.arrival_us - clock,
                                 attrs=[("is_cpu_op", True), ("serve_request", req.id), ("serve_prompt", req.prompt),
                                        ("serve_output", req.output)])
            clock, out[req.id], prev = req.arrival_us, node, node
        return out

    def _step(self, record: _StepRecord, previous: int | None, waits: list[int]) -> int:
        """One step on this stage: [recv activations], compute nodes with their collectives, [send]."""
        tpl, spec, layout = self.tpl, self.spec, self.spec.layout
        _, nodes, send = record.stages[self.stage]
        kind = "decode" if not record.shape.chunks else ("prefill" if not record.shape.decode else "mixed")
        name = f"{kind}.step{record.index}"
        deps = ([previous] if previous is not None else []) + waits
        if self.stage > 0:
            deps.append(tpl.recv(f"{name}.act", record.shape.tokens * spec.model.hidden * spec.engine.dtype_bytes,
                                 src=Param("prev"), dst=Param("me"), tag=_PP_TAG_BASE + 2 * record.index))
        elif layout.pp > 1 and record.index > 0:  # the tokens the last stage sampled in the previous step
            deps.append(tpl.recv(f"{name}.tokens", token_bytes(self.job.steps(self.inst)[record.index - 1].shape),
                                 src=Param("prev"), dst=Param("me"), tag=_PP_TAG_BASE + 2 * record.index - 1))
        step_attr: list[tuple[str, Value]] = [("serve_step", record.index)]
        last = 0
        for j, (flops, nbytes, micros, allreduce, alltoall) in enumerate(nodes):
            final = j == len(nodes) - 1 and self.stage == self.last_stage
            comp_attrs = step_attr + (self._token_attrs(record) if final and not allreduce else [])
            last = tpl.node(f"{name}.g{j}", NodeType.COMP_NODE, deps=list(dict.fromkeys(deps)), duration=micros,
                            attrs=[("is_cpu_op", False), ("num_ops", flops), ("tensor_size", nbytes)] + comp_attrs)
            if alltoall:
                for part in ("dispatch", "combine"):
                    last = tpl.coll(f"{name}.g{j}.all_to_all_{part}", CommType.ALL_TO_ALL, alltoall // 2,
                                    pg_name=self.ep_group, deps=[last], extra=step_attr)
            if allreduce:
                last = tpl.coll(f"{name}.g{j}.all_reduce", CommType.ALL_REDUCE, allreduce, pg_name=self.tp_group,
                                deps=[last], extra=step_attr + (self._token_attrs(record) if final else []))
            deps = [last]
        if send:
            tpl.send(f"{name}.act", send, src=Param("me"), dst=Param("next"), tag=_PP_TAG_BASE + 2 * record.index,
                     deps=[last])
        elif layout.pp > 1 and record.index + 1 < len(self.job.steps(self.inst)):  # the next step's stage 0 needs them
            tpl.send(f"{name}.tokens", token_bytes(record.shape), src=Param("me"), dst=Param("next"),
                     tag=_PP_TAG_BASE + 2 * record.index + 1, deps=[last])
        return last

    @staticmethod
    def _token_attrs(record: _StepRecord) -> list[tuple[str, Value]]:
        """Which requests the step's tokens belong to (an empty list is left out)."""
        named = (("serve_batch", record.batch), ("serve_first", record.first), ("serve_done", record.done))
        return [(attr, list(ids)) for attr, ids in named if ids]  # type: ignore[misc]


def llm_serve(model: str | ModelConfig = "llama3-8b", *, requests: Sequence[Request] | RequestSource,
              tp: int = 1, pp: int = 1, ep: int = 1, instances: int = 1, disaggregated: tuple[int, int] | None = None,
              device: str | Device = "H100", efficiency: float | None = None,
              max_batch_tokens: int = 8192, max_running: int = 256, kv_cache_frac: float = 0.9,
              block_size: int = 16, dtype: str = "bf16", layers_per_node: int = 0,
              comm_ns: CommCost | None = None, **model_fields: object) -> ServeJob:
    """A synthetic serving run of ``model`` over ``requests`` (see the module docstring).

    ``requests`` is a list of :class:`~etkit.generate.requests.Request` or a
    :class:`~etkit.generate.requests.RequestSource` (then the run can be regenerated by a sweep).
    ``disaggregated=(prefill_gpus, decode_gpus)`` splits the GPUs into prefill and decode instances of
    ``tp * pp`` GPUs each; otherwise ``instances`` colocated engines serve the requests. ``comm_ns``
    estimates communication for the scheduler's clock (default :func:`alpha_beta_comm`; the CLI passes
    :func:`etkit.simulate.probe.comm_cost` of the system it is given).
    """
    config = get_model(model, **model_fields)
    per = tp * pp
    if disaggregated is not None:
        prefill_gpus, decode_gpus = disaggregated
        if prefill_gpus < per or decode_gpus < per or prefill_gpus % per or decode_gpus % per:
            raise UsageError(f"disaggregated {prefill_gpus}:{decode_gpus}: each pool must be a positive multiple of "
                             f"tp x pp = {per} GPUs")
        layout = ServeLayout(tp, pp, ep, prefill=prefill_gpus // per, decode=decode_gpus // per)
    else:
        layout = ServeLayout(tp, pp, ep, instances=instances)
    engine = EngineConfig(max_batch_tokens, max_running, kv_cache_frac, block_size, dtype, layers_per_node)
    dev = get_device(device, efficiency)
    source = requests if isinstance(requests, RequestSource) else None
    listed = source.requests() if source is not None else list(requests)  # type: ignore[arg-type]
    settings: dict[str, object] | None = None
    if source is not None:
        settings = {"model": dataclasses.asdict(config), "tp": tp, "pp": pp, "ep": ep, "instances": instances,
                    "disaggregated": list(disaggregated) if disaggregated else None,
                    "device": dataclasses.asdict(dev), "engine": dataclasses.asdict(engine),
                    "requests": source.to_dict()}
    return ServeJob(ServeSpec(config, layout, engine, dev, tuple(listed)), comm_ns, settings=settings)


def llm_serve_from_settings(settings: dict, *, rate: float | None = None,
                            disaggregated: tuple[int, int] | None = None,
                            comm_ns: CommCost | None = None) -> ServeJob:
    """Regenerate a run from its recorded settings (:attr:`ServeJob.settings`), optionally at another
    request ``rate`` (requests/s) or prefill:decode split (``disaggregated`` GPUs)."""
    try:
        model = ModelConfig(**settings["model"])
        device = Device(**settings["device"])
        engine = dict(settings["engine"])
        source = RequestSource.from_dict(settings["requests"])
        split = disaggregated if disaggregated is not None else (
            tuple(settings["disaggregated"]) if settings.get("disaggregated") else None)
        kwargs = {k: int(settings[k]) for k in ("tp", "pp", "ep", "instances")}
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"the serving run's recorded settings are incomplete ({exc}); regenerate it with "
                         f"`etkit generate llm-serve`") from None
    if rate is not None:
        source = source.at_rate(rate)
    return llm_serve(model, requests=source, disaggregated=split, device=device, comm_ns=comm_ns,
                     **kwargs, **engine)  # type: ignore[arg-type]


def settings_of(metadata: object) -> dict | None:
    """The recorded settings of a serving run from a rank's GlobalMetadata (None when absent)."""
    from ..format.attrs import attr_value, find_attr

    found = find_attr(getattr(metadata, "attr", ()), "serve_settings")
    if found is None:
        return None
    try:
        data = orjson.loads(attr_value(found))
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None
