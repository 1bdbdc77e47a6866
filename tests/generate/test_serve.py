"""LLM serving runs: hand-computed step costs, the scheduler's batching, and simulated serving figures."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from etkit.analyze.serving import serving_metrics
from etkit.errors import EtkitError, UsageError
from etkit.format.attrs import attr_value, find_attr
from etkit.format.schema import CommType, NodeType
from etkit.generate.llm import ModelConfig
from etkit.generate.requests import Request, RequestSource, load_requests, parse_length, synthetic_requests
from etkit.generate.serve import (
    EngineConfig,
    ServeLayout,
    StepShape,
    kv_bytes_per_token,
    kv_capacity_tokens,
    llm_serve,
    llm_serve_from_settings,
    step_cost,
    weight_bytes_per_gpu,
)
from etkit.model.devices import Device
from etkit.simulate import load_config, simulate
from etkit.simulate.probe import comm_cost
from etkit.validate import validate

#: A small model whose costs are easy to compute by hand.
TINY = ModelConfig("tiny", layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=100, seq_len=256)
#: A device whose roofline gives round numbers: 1 TFLOP/s (1e6 FLOP per µs), 1 GB/s (1e3 B per µs).
ROUND = Device("round", peak_tflops=1.0, memory_gbps=1.0, efficiency=1.0, memory_gb=1.0)


def test_step_cost_of_a_prefill_and_a_decode_step_by_hand() -> None:
    layout, engine = ServeLayout(), EngineConfig()
    attention = 64 * (64 + 2 * 32) + 64 * 64  # QKV (kv hidden 32) + O = 12,288
    ffn = 3 * 64 * 128  # swiglu: 24,576
    # prefill of 10 new tokens after 6 cached ones: each token attends to 6 + its position in the chunk
    prefill = step_cost(TINY, layout, engine, StepShape(chunks=((10, 6),), logits=1))
    attended = 10 * 6 + 10 * 11 // 2
    assert prefill.layer_flops == 2 * 10 * (attention + ffn) + 4 * 64 * attended
    kv = 2 * 2 * 16 * 2  # K and V, 2 kv heads of dim 16, bf16: 128 bytes per token per layer
    assert kv_bytes_per_token(TINY, 1, 2) == kv
    activations = 10 * (4 * 64 + 2 * 32) + 2 * 10 * 128
    assert prefill.layer_bytes == (attention + ffn + activations) * 2 + kv * 16
    assert prefill.head_flops == 2 * 1 * 64 * 100
    assert prefill.head_bytes == 64 * 100 * 2 + 1 * 100 * 4
    # decode of 3 requests holding 5 + 7 + 9 tokens: each new token attends to its context and itself
    decode = step_cost(TINY, layout, engine, StepShape(decode=3, decode_context=21, logits=3))
    assert decode.layer_flops == 2 * 3 * (attention + ffn) + 4 * 64 * (21 + 3)
    assert decode.layer_bytes == (attention + ffn + 3 * (4 * 64 + 2 * 32) + 2 * 3 * 128) * 2 + kv * 24
    assert decode.allreduce_bytes == 0  # no tensor parallelism
    tp2 = step_cost(TINY, ServeLayout(tp=2), engine, StepShape(decode=3, decode_context=21, logits=3))
    assert tp2.allreduce_bytes == 3 * 64 * 2 and tp2.layer_flops == decode.layer_flops // 2


def test_kv_cache_capacity_from_device_memory() -> None:
    layout, engine = ServeLayout(), EngineConfig(kv_cache_frac=0.5, block_size=16)
    weights = weight_bytes_per_gpu(TINY, layout, 2)
    assert weights == (2 * (12_288 + 24_576) + 2 * 100 * 64) * 2
    per_token = 128 * 2  # two layers
    expected = int((0.5e9 - weights) // per_token) // 16 * 16
    assert kv_capacity_tokens(TINY, layout, engine, ROUND) == expected
    with pytest.raises(UsageError, match="no room"):
        kv_capacity_tokens(ModelConfig("big", 80, 8192, 64, 8, 28672, 128256, 8192), layout, engine, ROUND)


def test_a_single_request_on_an_idle_system_has_the_roofline_step_times() -> None:
    prompt, output = 200, 5
    job = llm_serve(TINY, requests=[Request(0, 1_000, prompt, output)], device=ROUND)
    steps = job.steps(0)
    assert len(steps) == output  # one prefill step (makes the first token), then a decode step per token
    layout, engine = job.spec.layout, job.spec.engine
    cost = step_cost(TINY, layout, engine, StepShape(chunks=((prompt, 0),), logits=1))
    prefill_us = ROUND.duration_us(2 * cost.layer_flops + cost.head_flops,
                                   2 * cost.layer_bytes + cost.head_bytes + cost.embed_bytes)
    assert steps[0].start_ns == 1_000_000 and steps[0].end_ns - steps[0].start_ns == prefill_us * 1000
    network, system, _ = load_config(preset="hgx-h100")
    result = _simulate_job(job, network, system)
    metrics = serving_metrics(job.to_job(), result.schedule)
    (times,) = metrics.requests
    assert times.arrival_ns == 1_000_000
    assert times.ttft_ns == prefill_us * 1000
    decode_ns = [s.end_ns - s.start_ns for s in steps[1:]]
    assert times.tpot_ns == pytest.approx(sum(decode_ns) / (output - 1))
    assert times.latency_ns == times.ttft_ns + sum(decode_ns)


def test_continuous_batching_respects_budget_slots_and_chunks() -> None:
    requests = [Request(i, 10 * i, 300, 20) for i in range(12)]
    job = llm_serve(TINY, requests=requests, device=ROUND, max_batch_tokens=256, max_running=4)
    steps = job.steps(0)
    assert all(s.shape.tokens <= 256 for s in steps)
    assert max(len(s.batch) for s in steps) <= 4
    assert any(s.shape.decode and s.shape.chunks for s in steps)  # decode tokens batched with a prefill chunk
    assert any(len(s.shape.chunks) and s.shape.chunks[0][1] > 0 for s in steps)  # a prompt split over steps
    firsts = [r for s in steps for r in s.first]
    dones = [r for s in steps for r in s.done]
    assert sorted(firsts) == sorted(dones) == list(range(12))


def test_preemption_when_the_kv_cache_runs_out_and_every_request_completes() -> None:
    # 0.00106 of 1 GB leaves about 3,500 tokens of cache (256 bytes each) for 8 requests of up to 700 tokens
    requests = [Request(i, 0, 200, 500) for i in range(8)]
    job = llm_serve(TINY, requests=requests, device=ROUND, kv_cache_frac=0.00106)
    assert 3000 < job.kv_capacity_tokens < 8 * 700
    steps = job.steps(0)
    prefill_tokens = sum(c for s in steps for c, _ in s.shape.chunks)
    assert prefill_tokens > 8 * 200  # some requests were recomputed after a preemption
    assert sorted(r for s in steps for r in s.done) == list(range(8))
    assert sorted(r for s in steps for r in s.first) == list(range(8))  # each first token once


def test_generated_serving_jobs_validate_and_the_simulation_reproduces_the_generator_clock(tmp_path: Path) -> None:
    network, system, _ = load_config(preset="hgx-h100")
    requests = synthetic_requests(20.0, duration_s=3, prompt_len="lognormal:256:0.5", output_len="uniform:8:64",
                                  seed=4)
    for name, kwargs in (("colocated", {"tp": 2, "instances": 2}), ("disagg", {"tp": 2, "disaggregated": (2, 2)}),
                         ("pp", {"tp": 2, "pp": 2})):
        world = 4
        job = llm_serve(TINY, requests=requests, comm_ns=comm_cost(network, system, world), **kwargs)
        job.write(tmp_path / name)
        assert validate(tmp_path / name).ok, name
        result = simulate(tmp_path / name, network, system)
        clock = max(s.end_ns for i in range(job.spec.layout.count) for s in job.steps(i))
        assert result.makespan_ns == pytest.approx(clock, rel=1e-4), name
        metrics = serving_metrics(tmp_path / name, result.schedule)
        assert metrics.completed == len(requests), name


def test_disaggregated_kv_transfers_have_the_cache_size_of_their_request(tmp_path: Path) -> None:
    requests = [Request(i, 1000 * i, 100 + 10 * i, 6) for i in range(5)]
    job = llm_serve(TINY, requests=requests, tp=2, pp=2, disaggregated=(4, 4))
    per_token_stage = kv_bytes_per_token(TINY, 2, 2) * 1  # one of the two layers per stage
    for rank in (0, 3, 4, 7):
        trace = job.trace(rank)
        kv_rows = [r for r in range(len(trace)) if trace.name(r).startswith("kv.r")]
        sizes = {int(trace.name(r)[4:]): int(trace.comm_size[r]) for r in kv_rows}
        assert sizes == {i: (100 + 10 * i) * per_token_stage for i in range(5)}, rank  # the prompt's KV
        kind = NodeType.COMM_SEND_NODE if rank < 4 else NodeType.COMM_RECV_NODE
        assert {int(trace.types[r]) for r in kv_rows} == {kind}
        peers = {int(trace.comm_dst[r] if rank < 4 else trace.comm_src[r]) for r in kv_rows}
        assert peers == {rank + 4 if rank < 4 else rank - 4}


def test_moe_experts_all_to_all_and_tensor_parallel_all_reduce() -> None:
    moe = ModelConfig("tiny-moe", layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=100, seq_len=256,
                      experts=4, top_k=2)
    job = llm_serve(moe, requests=[Request(0, 0, 32, 2)], tp=2, ep=2)
    trace = job.trace(1)
    colls = [r for r in range(len(trace)) if trace.types[r] == NodeType.COMM_COLL_NODE]
    kinds = [int(trace.comm_type[r]) for r in colls]
    assert kinds == [CommType.ALL_TO_ALL, CommType.ALL_TO_ALL, CommType.ALL_REDUCE] * 2  # prefill, decode steps
    prefill_a2a = int(trace.comm_size[colls[0]])
    assert prefill_a2a == 2 * 32 * 2 * 64 * 2  # two layers x tokens x top-k x hidden x bf16
    assert int(trace.comm_size[colls[2]]) == 2 * 2 * 32 * 64 * 2  # two all-reduces per layer, two layers


def test_queueing_makes_ttft_grow_past_saturation_only(tmp_path: Path) -> None:
    network, system, _ = load_config(preset="hgx-h100")

    def median_ttft(rate: float, seconds: float) -> float:
        source = RequestSource(rate=rate, duration_s=seconds, prompt_len="2000", output_len="4", seed=2)
        job = llm_serve(TINY, requests=source, device=ROUND, comm_ns=comm_cost(network, system, 1))
        result = _simulate_job(job, network, system)
        return serving_metrics(job.to_job(), result.schedule).percentiles("ttft_ns")[50]

    # one prefill of 2,000 tokens takes about 9.5 ms on this device: about 100 requests/s saturate it
    below = [median_ttft(40.0, s) for s in (2.0, 8.0)]
    above = [median_ttft(200.0, s) for s in (2.0, 8.0)]
    assert below[1] < 1.5 * below[0] + 5
    assert above[1] > 3 * above[0]


def test_regenerating_from_recorded_settings_gives_the_same_run_and_other_rates(tmp_path: Path) -> None:
    source = RequestSource(rate=10.0, count=20, prompt_len="128", output_len="8", seed=3)
    job = llm_serve(TINY, requests=source, tp=2, instances=2, device=ROUND)
    job.write(tmp_path / "a")
    from etkit.serving import job_settings

    settings = job_settings(tmp_path / "a")
    again = llm_serve_from_settings(settings)
    again.write(tmp_path / "b")
    for rank in range(4):
        assert (tmp_path / f"a.{rank}.et").read_bytes() == (tmp_path / f"b.{rank}.et").read_bytes()
    faster = llm_serve_from_settings(settings, rate=40.0)
    assert faster.spec.requests[-1].arrival_us < job.spec.requests[-1].arrival_us / 2
    split = llm_serve_from_settings(settings, disaggregated=(2, 2))
    assert split.spec.layout.disaggregated and split.world_size == 4


def test_request_files_and_length_distributions(tmp_path: Path) -> None:
    csv_file = tmp_path / "r.csv"
    csv_file.write_text("arrival_s,prompt_tokens,output_tokens\n0.5,100,10\n0.1,50,5\n")
    assert load_requests(csv_file) == [Request(0, 100_000, 50, 5), Request(1, 500_000, 100, 10)]
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text('{"arrival_ms": 3, "input_tokens": 7, "output_len": 2}\n')
    assert load_requests(jsonl) == [Request(0, 3_000, 7, 2)]
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens\n0.1,-5,3\n")
    with pytest.raises(EtkitError, match=r"bad.csv:2: prompt_tokens '-5'"):
        load_requests(bad)
    missing = tmp_path / "missing.csv"
    missing.write_text("when,prompt_tokens\n1,2\n")
    with pytest.raises(EtkitError, match=r"missing.csv:2: missing arrival time"):
        load_requests(missing)
    a = synthetic_requests(5.0, count=200, prompt_len="uniform:10:20", output_len="lognormal:50:0.5", seed=7)
    assert a == synthetic_requests(5.0, count=200, prompt_len="uniform:10:20", output_len="lognormal:50:0.5", seed=7)
    assert all(10 <= r.prompt <= 20 for r in a)
    gaps = np.diff([r.arrival_us for r in a])
    assert np.mean(gaps) == pytest.approx(200_000, rel=0.2)  # Poisson at 5/s
    with pytest.raises(UsageError):
        parse_length("gamma:1:2")


def test_serving_attributes_name_the_requests_of_each_step() -> None:
    job = llm_serve(TINY, requests=[Request(0, 0, 16, 3), Request(1, 0, 16, 2)], device=ROUND)
    trace = job.trace(0)
    arrivals = [trace.node(r) for r in range(len(trace)) if trace.name(r).startswith("serve.arrive")]
    assert [attr_value(find_attr(n.attr, "serve_request")) for n in arrivals] == [0, 1]
    assert all(attr_value(find_attr(n.attr, "is_cpu_op")) for n in arrivals)
    token_nodes = [trace.node(r) for r in range(len(trace)) if find_attr(trace.node(r).attr, "serve_batch")]
    batches = [attr_value(find_attr(n.attr, "serve_batch")) for n in token_nodes]
    assert batches[0] == [0, 1] and batches[-1] == [0]
    done = [r for n in token_nodes if (a := find_attr(n.attr, "serve_done")) for r in attr_value(a)]
    assert done == [1, 0]
    assert not math.isnan(len(batches))


def _simulate_job(job, network, system):  # noqa: ANN001, ANN202
    return simulate(job.to_job(), network, system)


@pytest.mark.shared_data
def test_serving_jobs_run_on_astra_sim_after_export_with_etkit_s_makespan(tmp_path: Path) -> None:
    from etkit import export
    from etkit.executor import SerialExecutor
    from tests.astra.harness import NetworkSpec, compare, run_astra, write_system

    requests = synthetic_requests(2000.0, count=12, prompt_len="uniform:64:256", output_len="uniform:2:12", seed=5)
    net = NetworkSpec(("Switch",), (4,), (100.0,), (500.0,)).write(tmp_path / "net.yml")
    system = write_system(tmp_path / "sys.json", {"preferred-dataset-splits": 4})
    network_cfg, system_cfg, _ = load_config(net, system)
    for name, kwargs in (("colocated", {"tp": 2, "instances": 2}), ("disagg", {"tp": 2, "disaggregated": (2, 2)})):
        job = llm_serve(TINY, requests=requests, comm_ns=comm_cost(network_cfg, system_cfg, 4), **kwargs)
        job.write(tmp_path / name)
        done = export.astra_sim(tmp_path / name, tmp_path / f"{name}-astra", network=net, system=system,
                                executor=SerialExecutor())
        memory = [f"--remote-memory-configuration={done.memory}"]
        for aware in (False, True):
            run = run_astra(tmp_path / f"{name}-astra", done.network, done.system, comm_groups=done.comm_groups,
                            aware=aware, extra=memory, timeout=120)
            assert run.complete(4), f"{name}: ASTRA-sim did not finish: {run.output_tail[-400:]}"
            ours = simulate(tmp_path / name, network_cfg, system_cfg, congestion="aware" if aware else "unaware")
            assert compare(run.finish, {r: f.finish_ns for r, f in ours.ranks.items()}).max_rel <= 1e-3, name
