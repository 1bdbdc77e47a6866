"""Generated LLM training steps against the closed forms of docs/llm-workloads.md.

Expectations are derived here from the model configuration and the layout definitions (Megatron rank
order, the parameter formula, per-parallelism traffic), never from the generator's own output.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from etkit.errors import UsageError
from etkit.format.schema import CommType, NodeType
from etkit.generate import llm
from etkit.generate.llm import MODELS, _StageBuilder
from etkit.model import Job, load_job
from etkit.validate import validate_job

from .p2p_checks import assert_sends_match_recvs

BF16, FP32 = 2, 4


# -- independent closed forms ---------------------------------------------------------------------

def layer_matmul_params(model: str, **over: int) -> int:
    """Parameters one token meets in a layer's matrix products (attention + active FFN + router)."""
    cfg = {**MODELS[model].__dict__, **over}
    h, a, kv, f = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["ffn"]
    ffn_mats = 3 if cfg["ffn_kind"] == "swiglu" else 2
    attn = 2 * h * h + 2 * h * (h * kv // a)
    if cfg["experts"] > 1:
        return attn + cfg["top_k"] * ffn_mats * h * f + h * cfg["experts"]
    return attn + ffn_mats * h * f


def expected_step_flops(model: str, *, dp: int, mb: int, micro: int = 1, recompute: str = "none",
                        **over: int) -> float:
    """6·N·tokens + 12·L·s·h·tokens, N = layer params + output head; plus one forward of what is recomputed."""
    cfg = {**MODELS[model].__dict__, **over}
    L, h, s, V = cfg["layers"], cfg["hidden"], cfg["seq_len"], cfg["vocab"]
    tokens = micro * mb * dp * s
    n_layers = L * layer_matmul_params(model, **over)
    total = 6 * (n_layers + V * h) * tokens + 12 * L * s * h * tokens
    if recompute == "full":
        total += 2 * n_layers * tokens + 4 * L * s * h * tokens
    elif recompute == "selective":
        total += 4 * L * s * h * tokens
    return total


def megatron_groups(dp: int, tp: int, pp: int, rank: int) -> dict[str, set[int]]:
    """Tensor, data and pipeline neighbours of ``rank`` (tensor fastest, then data, then pipeline)."""
    t, d, p = rank % tp, (rank // tp) % dp, rank // (tp * dp)
    return {"tp": {i + tp * (d + dp * p) for i in range(tp)},
            "dp": {t + tp * (j + dp * p) for j in range(dp)},
            "stage": {p}}


def pg_of(job: Job, members: set[int]) -> str:
    names = [name for name, ranks in job.groups.groups.items() if set(ranks) == members]
    assert len(names) == 1, f"expected exactly one group {sorted(members)}, found {names}"
    return names[0]


def coll_bytes(job: Job, rank: int, pg: str, comm_type: CommType) -> tuple[int, int]:
    """(count, total comm_size) of collectives of ``comm_type`` on ``pg`` at ``rank``."""
    trace = job.traces[rank]
    sel = (trace.types == NodeType.COMM_COLL_NODE) & (trace.pg_names() == pg) & (trace.comm_type == comm_type)
    return int(sel.sum()), int(trace.comm_size[sel].sum())


def total_flops(job: Job) -> int:
    return sum(int(t.num_ops[t.types == NodeType.COMP_NODE].sum()) for t in job.traces.values())


def ideal_finish_times(job: Job) -> dict[object, float]:
    """Finish time (µs) of every node with unlimited communication speed, or an AssertionError on a cycle.

    The job's happens-before graph: dependencies, send -> matching recv, and each collective instance
    (the k-th collective of a group on every member) as one node that all members must reach. Compute
    nodes take their duration, communication none; a node finishes its duration after its last
    predecessor (each rank's compute nodes are chained, so one kernel runs at a time).
    """
    node_of: dict[tuple[int, int], object] = {}
    duration: dict[object, float] = {}
    edges: list[tuple[object, object]] = []
    recv_node: dict[tuple[int, int, int], object] = {}
    sends: list[tuple[tuple[int, int, int], object]] = []
    for rank, trace in job.traces.items():
        seen: dict[str, int] = defaultdict(int)
        pgs = trace.pg_names()
        for row in range(len(trace)):
            kind = trace.types[row]
            if kind == NodeType.COMM_COLL_NODE:
                node: object = ("coll", pgs[row], seen[pgs[row]])
                seen[pgs[row]] += 1
            else:
                node = (rank, row)
            node_of[(rank, int(trace.ids[row]))] = node
            duration[node] = float(trace.duration[row]) if kind == NodeType.COMP_NODE else 0.0
            key = (int(trace.comm_src[row]), int(trace.comm_dst[row]), int(trace.comm_tag[row]))
            if kind == NodeType.COMM_RECV_NODE:
                recv_node[key] = node
            elif kind == NodeType.COMM_SEND_NODE:
                sends.append((key, node))
        for row in range(len(trace)):
            child = node_of[(rank, int(trace.ids[row]))]
            edges += [(node_of[(rank, int(d))], child) for d in trace.deps_of(row)]
    edges += [(node, recv_node[key]) for key, node in sends]
    indegree: dict[object, int] = defaultdict(int)
    children: dict[object, list[object]] = defaultdict(list)
    for src, dst in set(edges):
        children[src].append(dst)
        indegree[dst] += 1
    start = {node: 0.0 for node in duration}
    finish: dict[object, float] = {}
    ready = [n for n in duration if indegree[n] == 0]
    while ready:
        node = ready.pop()
        finish[node] = start[node] + duration[node]
        for child in children[node]:
            start[child] = max(start[child], finish[node])
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    assert len(finish) == len(duration), f"{len(duration) - len(finish)} nodes can never run (cross-rank cycle)"
    return finish


def assert_no_deadlock(job: Job) -> None:
    ideal_finish_times(job)


# -- FLOPs -----------------------------------------------------------------------------------------

FLOP_CASES = [
    ("llama3-8b", dict(layers=4, dp=2, tp=2, pp=2, microbatches=4), "none"),
    ("llama3-70b", dict(layers=4, tp=4, pp=2, microbatches=2, recompute="full"), "full"),
    ("llama3-70b", dict(layers=4, tp=2, pp=2, microbatches=2, recompute="selective", sequence_parallel=True),
     "selective"),
    ("llama3-405b", dict(layers=2, tp=8, microbatches=1), "none"),
    ("gpt3-175b", dict(layers=4, dp=2, tp=4, pp=2, microbatches=3, schedule="gpipe"), "none"),
    ("mixtral-8x7b", dict(layers=4, dp=4, ep=2, tp=2, pp=2, microbatches=2, zero=3), "none"),
]


@pytest.mark.parametrize(("model", "kwargs", "recompute"), FLOP_CASES)
def test_step_flops_match_6N_tokens(model: str, kwargs: dict, recompute: str) -> None:
    job = llm(model, **kwargs).to_job()
    dp = kwargs.get("dp", 1)
    expected = expected_step_flops(model, dp=dp, mb=kwargs["microbatches"], recompute=recompute,
                                   layers=kwargs["layers"])
    assert abs(total_flops(job) - expected) / expected < 0.02


def test_every_compute_node_has_flops_bytes_and_roofline_duration() -> None:
    job = llm("llama3-8b", layers=2, tp=2, pp=2, microbatches=2, device="A100", efficiency=0.5).to_job()
    for trace in job.traces.values():
        comp = trace.types == NodeType.COMP_NODE
        assert (trace.tensor_size[comp] > 0).all()
        flops, nbytes = trace.num_ops[comp].astype(float), trace.tensor_size[comp].astype(float)
        roofline_us = np.maximum(flops / 312e6, nbytes / 2000e3) / 0.5
        assert np.allclose(trace.duration[comp], np.maximum(np.ceil(roofline_us), 1))
        assert (trace.is_cpu_op == 0).all()
        names = trace.names[comp]
        assert any(n.startswith("fwd.") for n in names) and any(n.startswith("bwd.") for n in names)
        assert names[-1] == "optimizer"


# -- per-parallelism traffic -----------------------------------------------------------------------

def test_tensor_parallel_all_reduces_per_layer() -> None:
    L, dp, tp, pp, m = 4, 2, 2, 2, 3
    job = llm("llama3-8b", layers=L, dp=dp, tp=tp, pp=pp, microbatches=m).to_job()
    act = 8192 * 4096 * BF16  # b·s·h·β
    for rank in job.ranks:
        g = megatron_groups(dp, tp, pp, rank)
        stage = next(iter(g["stage"]))
        # 2 forward + 2 backward per layer, plus the vocab-parallel embedding (first) and head (last).
        count = m * (4 * L // pp + (stage == 0) + (stage == pp - 1))
        assert coll_bytes(job, rank, pg_of(job, g["tp"]), CommType.ALL_REDUCE) == (count, count * act)


def test_sequence_parallel_gathers_and_scatters() -> None:
    L, tp, pp, m = 4, 4, 2, 2
    job = llm("llama3-8b", layers=L, tp=tp, pp=pp, microbatches=m, sequence_parallel=True).to_job()
    act = 8192 * 4096 * BF16
    for rank in job.ranks:
        g = megatron_groups(1, tp, pp, rank)
        stage = next(iter(g["stage"]))
        pg = pg_of(job, g["tp"])
        count = m * (4 * L // pp + (stage == 0) + (stage == pp - 1))
        assert coll_bytes(job, rank, pg, CommType.ALL_GATHER) == (count, count * act // tp)
        assert coll_bytes(job, rank, pg, CommType.REDUCE_SCATTER) == (count, count * act)
        assert coll_bytes(job, rank, pg, CommType.ALL_REDUCE) == (0, 0)
    # Pipeline messages shrink by tp with sequence parallelism.
    sends = assert_sends_match_recvs(job)
    assert {size for (_, _, _, size) in sends} == {act // tp}


def stage_grad_params(model: str, layers: int, tp: int, pp: int, stage: int) -> int:
    """Parameters of one tensor-parallel shard of a stage: its layers, plus embedding / head at the ends."""
    cfg = MODELS[model]
    vocab = -(-cfg.vocab // tp) * tp
    params = layers // pp * layer_matmul_params(model) // tp
    params += (stage == 0) * vocab * cfg.hidden // tp
    if not (cfg.tied_embeddings and pp == 1):
        params += (stage == pp - 1) * vocab * cfg.hidden // tp
    return params


@pytest.mark.parametrize("zero", [0, 1])
def test_data_parallel_gradient_reduction_is_the_shard(zero: int) -> None:
    L, dp, tp, pp = 4, 4, 2, 2
    job = llm("llama3-8b", layers=L, dp=dp, tp=tp, pp=pp, microbatches=2, zero=zero, bucket_mb=40).to_job()
    comm = CommType.ALL_REDUCE if zero == 0 else CommType.REDUCE_SCATTER
    for rank in job.ranks:
        g = megatron_groups(dp, tp, pp, rank)
        stage = next(iter(g["stage"]))
        grads = stage_grad_params("llama3-8b", L, tp, pp, stage) * FP32
        count, total = coll_bytes(job, rank, pg_of(job, g["dp"]), comm)
        assert total == grads
        assert 1 <= count <= grads // 40e6 + 1  # buckets of at least 40 MB, the last one may be smaller
        gathered = coll_bytes(job, rank, pg_of(job, g["dp"]), CommType.ALL_GATHER)[1]
        if zero == 0:
            assert gathered == 0
        else:  # parameters (bf16) all-gathered after the update: each rank contributes its 1/dp shard
            shard = stage_grad_params("llama3-8b", L, tp, pp, stage) * BF16 / dp
            assert shard <= gathered <= shard + count * BF16


def test_zero3_gathers_parameters_before_forward_and_backward() -> None:
    L, dp, m = 2, 4, 3
    job = llm("llama3-8b", layers=L, dp=dp, microbatches=m, fsdp=True).to_job()
    all_params = stage_grad_params("llama3-8b", L, 1, 1, 0)
    for rank in job.ranks:
        count, gathered = coll_bytes(job, rank, pg_of(job, set(range(dp))), CommType.ALL_GATHER)
        blocks = L + 2  # layers, embedding, head
        assert count == 2 * m * blocks
        assert abs(gathered - 2 * m * all_params * BF16 / dp) <= count * BF16
        assert coll_bytes(job, rank, pg_of(job, set(range(dp))), CommType.REDUCE_SCATTER)[1] == all_params * FP32


def test_pipeline_sends_activations_and_gradients_per_microbatch() -> None:
    L, dp, tp, pp, m = 8, 2, 2, 4, 5
    job = llm("llama3-8b", layers=L, dp=dp, tp=tp, pp=pp, microbatches=m).to_job()
    act = 8192 * 4096 * BF16
    sends = assert_sends_match_recvs(job)
    per_pair: dict[tuple[int, int], list[int]] = defaultdict(list)
    for (src, dst, _tag, size) in sends:
        per_pair[(src, dst)].append(size)
    for rank in job.ranks:
        stage = rank // (tp * dp)
        nxt, prev = rank + tp * dp, rank - tp * dp
        assert per_pair.get((rank, nxt), []) == ([act] * m if stage < pp - 1 else [])
        assert per_pair.get((rank, prev), []) == ([act] * m if stage > 0 else [])
    assert len(sends) == 2 * m * (pp - 1) * tp * dp


def test_expert_parallel_all_to_all_and_expert_gradients() -> None:
    L, dp, ep, tp, m = 2, 4, 2, 2, 2
    job = llm("mixtral-8x7b", layers=L, dp=dp, ep=ep, tp=tp, microbatches=m).to_job()
    cfg = MODELS["mixtral-8x7b"]
    act = cfg.seq_len * cfg.hidden * BF16
    expert_params = L * (cfg.experts // ep) * 3 * cfg.hidden * cfg.ffn // tp
    for rank in job.ranks:
        t, d = rank % tp, rank // tp
        ep_group = {t + tp * (d // ep * ep + j) for j in range(ep)}
        edp_group = {t + tp * (d % ep + ep * j) for j in range(dp // ep)}
        # dispatch + combine in forward, both again in backward, top_k tokens each
        all_to_all = coll_bytes(job, rank, pg_of(job, ep_group), CommType.ALL_TO_ALL)
        assert all_to_all == (4 * L * m, 4 * L * m * act * cfg.top_k)
        assert coll_bytes(job, rank, pg_of(job, edp_group), CommType.ALL_REDUCE)[1] == expert_params * FP32
        # Dense weights go over the whole data-parallel group: attention (kv hidden 1024), the router
        # (replicated on tensor ranks), the embedding and the head.
        h = cfg.hidden
        dense = L * ((2 * h * h + 2 * h * 1024) // tp + h * cfg.experts) + 2 * cfg.vocab * h // tp
        dp_group = pg_of(job, megatron_groups(dp, tp, 1, rank)["dp"])
        assert coll_bytes(job, rank, dp_group, CommType.ALL_REDUCE)[1] == dense * FP32


def test_tied_embeddings_are_reduced_between_first_and_last_stage() -> None:
    tp, pp = 2, 3
    job = llm("gpt3-175b", layers=3, tp=tp, pp=pp, microbatches=2).to_job()
    vocab = -(-50257 // tp) * tp
    for rank in job.ranks:
        stage = rank // tp
        pair = {rank % tp, rank % tp + tp * (pp - 1)}
        if stage in (0, pp - 1):
            assert coll_bytes(job, rank, pg_of(job, pair), CommType.ALL_REDUCE) == (1, vocab * 12288 // tp * FP32)
        else:
            assert pg_of(job, pair) not in set(job.traces[rank].pg_names())


# -- dependencies ------------------------------------------------------------------------------------

def pass_order(trace) -> list[tuple[str, int]]:  # noqa: ANN001
    """Forward/backward passes in compute-chain order, from the compute node names."""
    order: list[tuple[str, int]] = []
    for name in trace.names[trace.types == NodeType.COMP_NODE]:
        if name.startswith(("fwd.mb", "bwd.mb")):
            key = ("F" if name[0] == "f" else "B", int(name.split(".")[1][2:]))
            if not order or order[-1] != key:
                order.append(key)
    return order


def peak_in_flight(order: list[tuple[str, int]]) -> int:
    """Most micro-batches whose forward ran and whose backward did not, along ``order``."""
    in_flight = peak = 0
    for kind, _ in order:
        in_flight += 1 if kind == "F" else -1
        peak = max(peak, in_flight)
    return peak


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_pipeline_schedule_bounds_microbatches_in_flight(schedule: str) -> None:
    pp, m = 4, 6
    job = llm("llama3-8b", layers=4, pp=pp, microbatches=m, schedule=schedule).to_job()
    for stage, trace in job.traces.items():
        order = pass_order(trace)
        assert sorted(order) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
        assert [i for k, i in order if k == "F"] == list(range(m))
        assert [i for k, i in order if k == "B"] == list(range(m))
        assert peak_in_flight(order) == (min(pp - stage, m) if schedule == "1f1b" else m)
    assert_no_deadlock(job)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_pipeline_bubble_is_p_minus_1_over_m_plus_p_minus_1(schedule: str) -> None:
    """With free communication and equal stages, a step lasts (m + p - 1) x (forward + backward) of one stage."""
    pp, m = 4, 6
    # A tiny vocabulary makes the embedding and the head negligible, so all stages cost the same.
    job = llm("llama3-8b", layers=8, vocab=64, pp=pp, microbatches=m, schedule=schedule).to_job()
    middle = job.traces[1]
    one_mb = sum(int(middle.duration[r]) for r in range(len(middle))
                 if middle.name(r).startswith(("fwd.mb0.", "bwd.mb0.")))
    finish = ideal_finish_times(job)
    last_backward = max(t for node, t in finish.items()
                        if isinstance(node[0], int) and job.traces[node[0]].name(node[1]).startswith("bwd."))
    assert last_backward == pytest.approx((m + pp - 1) * one_mb, rel=0.01)


def test_forward_waits_for_received_activation() -> None:
    job = llm("llama3-8b", layers=2, pp=2, tp=2, microbatches=3).to_job()
    trace = job.traces[2]  # stage 1
    names = list(trace.names)
    for mb in range(3):
        recv = names.index(f"recv_act.mb{mb}")
        first = next(i for i, n in enumerate(names) if n.startswith(f"fwd.mb{mb}."))
        assert trace.ids[recv] in trace.deps_of(first)
        assert trace.types[recv] == NodeType.COMM_RECV_NODE


def descendants(trace, rows: list[int]) -> set[int]:  # noqa: ANN001
    children: dict[int, list[int]] = defaultdict(list)
    for row in range(len(trace)):
        for dep in trace.rows_of(trace.deps_of(row)):
            children[int(dep)].append(row)
    seen: set[int] = set()
    stack = list(rows)
    while stack:
        for child in children[stack.pop()]:
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def test_gradient_buckets_overlap_backward() -> None:
    job = llm("llama3-8b", layers=4, dp=4, microbatches=2, bucket_mb=25).to_job()
    trace = job.traces[0]
    grad = [i for i, n in enumerate(trace.names) if n.startswith("grad_all_reduce")]
    comp = set(np.flatnonzero(trace.types == NodeType.COMP_NODE).tolist())
    assert len(grad) > 4
    # Only the optimizer waits for gradient reduction; backward compute never does.
    assert [trace.name(r) for r in descendants(trace, grad) & comp] == ["optimizer"]
    # The first bucket is launched while most of the last backward is still to run.
    producer = int(trace.rows_of(trace.deps_of(grad[0]))[0])
    later_backward = [r for r in comp if r > producer and trace.name(r).startswith("bwd.mb1.")]
    assert len(later_backward) > 10


# -- whole jobs ------------------------------------------------------------------------------------

def test_one_template_per_stage_however_many_ranks(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    built: list[int] = []
    original = _StageBuilder.build

    def counting(self):  # noqa: ANN001, ANN202
        built.append(self.stage)
        return original(self)

    monkeypatch.setattr(_StageBuilder, "build", counting)
    job = llm("llama3-8b", layers=4, dp=8, tp=4, pp=2, microbatches=2)
    paths = job.write(tmp_path / "j")
    assert len(paths) == 64 and sorted(built) == [0, 1]
    loaded = load_job(tmp_path / "j")
    memory = job.to_job()
    assert sorted(built) == [0, 1]
    for rank in (0, 9, 33, 63):
        assert list(loaded.traces[rank].records()) == list(memory.traces[rank].records())
    assert loaded.groups.groups == memory.groups.groups


def test_validate_passes_on_128_ranks() -> None:
    job = llm("llama3-70b", layers=8, dp=8, tp=4, pp=4, microbatches=4).to_job()
    assert job.world_size == 128
    report = validate_job(job)
    assert report.ok, report.findings[:5]
    assert_sends_match_recvs(job)


@pytest.mark.slow
def test_validate_passes_on_1024_ranks() -> None:
    job = llm("llama3-8b", layers=4, hidden=1024, heads=8, kv_heads=8, ffn=2048, vocab=32000, seq_len=1024,
              dp=32, tp=8, pp=4, microbatches=4, sequence_parallel=True).to_job()
    assert job.world_size == 1024
    report = validate_job(job)
    assert report.ok, report.findings[:5]
    assert_sends_match_recvs(job)


@pytest.mark.parametrize("kwargs", [
    dict(dp=2, tp=2, pp=2, microbatches=3, zero=1, recompute="full"),
    dict(dp=2, pp=3, microbatches=2, schedule="gpipe", zero=3),
    dict(dp=4, ep=4, tp=2, microbatches=2, sequence_parallel=True, model="mixtral-8x7b"),
    dict(tp=2, pp=3, microbatches=4, model="gpt3-175b"),
])
def test_layouts_are_valid_and_deadlock_free(kwargs: dict) -> None:
    kwargs = {"model": "llama3-8b", **kwargs}
    job = llm(kwargs.pop("model"), layers=3, **kwargs).to_job()
    report = validate_job(job)
    assert report.ok, report.findings[:5]
    assert_no_deadlock(job)


def test_global_batch_sets_microbatches() -> None:
    assert llm("llama3-8b", layers=2, dp=4, micro_batch=2, global_batch=64).spec.train.microbatches == 8
    with pytest.raises(UsageError):
        llm("llama3-8b", dp=3, global_batch=64)


@pytest.mark.parametrize("kwargs", [dict(tp=3), dict(ep=2, dp=2), dict(pp=40, layers=32),
                                    dict(model="nope"), dict(sequence_parallel=True), dict(zero=4),
                                    dict(hidden=4001)])
def test_impossible_configurations_are_refused(kwargs: dict) -> None:
    with pytest.raises(UsageError):
        llm(kwargs.pop("model", "llama3-8b"), **kwargs)
