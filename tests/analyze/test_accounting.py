"""One time accounting (etkit.model.accounting) in every verb: the simulator's figures and the analyses of
its schedule agree exactly, and a receive posted long before its send waits, it does not communicate."""

from __future__ import annotations

import pytest

from etkit.analyze import analyze_job, breakdown
from etkit.model.accounting import CATEGORIES

from .builders import RECV, SEND, N, build_job, comp

S = 1_000_000_000


def test_a_receive_posted_at_zero_waits_for_its_send(tmp_path):
    # rank 1 posts its receive at t=0; rank 0 computes 4 s, then sends for 1 ms: 4 s of waiting, 1 ms of comm
    job = build_job(tmp_path, {
        0: [comp(1, 1, 4_000_000, name="fwd"),
            N(2, SEND, 4_000_001, 1000, [1], "send", {"comm_dst": 1, "comm_tag": 0, "comm_size": 64})],
        1: [N(1, RECV, 1, 4_001_000, [], "recv", {"comm_src": 0, "comm_tag": 0, "comm_size": 64}),
            comp(2, 4_001_001, 1000, [1], "bwd")]})
    b = breakdown(job).ranks[1]
    assert b.waiting_ns == 4 * S and b.exposed_comm_ns == 1_000_000 and b.idle_ns == 0
    assert sum(getattr(b, f"{c}_ns") for c in CATEGORIES) == b.span_ns
    top = {o.name: o for o in analyze_job(job).top_ops.by_name}
    assert top["recv"].total_ns == 4_001_000_000  # its time is still its time; only the accounting splits it


@pytest.mark.slow
def test_analyze_report_and_simulate_agree_on_a_128_rank_llama3_70b(tmp_path):
    from etkit.generate import llm
    from etkit.simulate import load_config, simulate
    from etkit.viz.report import write_report

    job = llm(model="llama3-70b", dp=8, tp=4, pp=4).to_job()
    net, system, _ = load_config(None, None, preset="hgx-h100")
    result = simulate(job, net, system)
    analysis = analyze_job(job, result.schedule)
    for rank, f in result.ranks.items():
        b = analysis.breakdown.ranks[rank]
        assert (b.span_ns, b.compute_ns, b.exposed_comm_ns, b.memory_ns, b.waiting_ns, b.host_ns, b.idle_ns) == \
            (f.span_ns, f.compute_ns, f.exposed_comm_ns, f.memory_ns, f.waiting_ns, f.host_ns, f.idle_ns), rank
    f0, b0 = result.ranks[0], analysis.breakdown.ranks[0]
    assert 0.3 < f0.waiting_ns / f0.span_ns < 0.4 and f0.exposed_comm_ns < 0.1 * f0.span_ns  # the pipeline bubble
    top = analysis.top_ops.by_exclusive(1)[0]
    assert not top.name.startswith("recv")  # waiting is not the costliest operator's own time
    page = write_report(job, tmp_path / "r.html", schedule=result.schedule).read_text()
    assert f"{100 * b0.waiting_ns / b0.span_ns:.1f}%" in page
