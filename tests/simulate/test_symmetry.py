"""Rank symmetry with point-to-point: pipeline stages of different replicas simulate once, and every
rank's result equals simulating every rank (``Knobs(symmetry=False)``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from etkit.generate.llm import llm
from etkit.simulate import Knobs, load_config, simulate
from etkit.simulate.workload import rank_classes

from .helpers import net


def llm_job(**layout):
    return llm("llama3-8b", microbatches=4, layers=4, **layout).to_job()


def assert_same_as_every_rank(job, network, system, **knobs) -> object:
    merged = simulate(job, network, system, Knobs(**knobs))
    alone = simulate(job, network, system, Knobs(symmetry=False, **knobs))
    assert alone.classes == len(job.traces)
    for rank in job.traces:
        assert merged.ranks[rank] == alone.ranks[rank], rank
        a, b = merged.schedule.ranks[rank], alone.schedule.ranks[rank]
        assert np.array_equal(a.start_ns, b.start_ns) and np.array_equal(a.end_ns, b.end_ns)
    return merged


@pytest.mark.parametrize("layout", [dict(dp=2, pp=4), dict(dp=2, tp=2, pp=2), dict(dp=4, tp=2, pp=2, sequence_parallel=True),
                                    dict(dp=2, tp=2, pp=2, zero=3)])
def test_pipeline_stages_merge_across_replicas(layout) -> None:
    # hgx-h100: 8 GPUs a node; every rank of a stage is in the same position (a full node or one rail)
    job = llm_job(**layout)
    network, system, _ = load_config(preset="hgx-h100")
    merged = assert_same_as_every_rank(job, network, system)
    assert merged.classes == layout["pp"]  # one per stage: all its ranks run the same graph with matching peers
    assert merged.simulated_nodes == sum(len(job.traces[r]) for r in range(0, len(job.traces), len(job.traces) // layout["pp"]))


def test_expert_parallel_job_merges_and_matches() -> None:
    job = llm("mixtral-8x7b", dp=4, ep=2, pp=2, microbatches=2, layers=2).to_job()
    network, system, _ = load_config(preset="hgx-h100")
    assert assert_same_as_every_rank(job, network, system).classes == 2


def test_network_position_splits_replicas() -> None:
    # 9 NPUs as 3 x 3: rank r sits at (r % 3, r // 3). Replica 0 (ranks 0, 2, 4, 6) and replica 1
    # (1, 3, 5, 7) take different routes between stages, so they must not share classes.
    job = llm_job(dp=2, pp=4)
    two_dims = net(("Ring", 3, 50.0, 500.0), ("Switch", 3, 25.0, 900.0))
    _, system, _ = load_config(preset="hgx-h100")
    merged = assert_same_as_every_rank(job, two_dims, system)
    assert merged.classes > 4


def test_straggler_and_aware_congestion_keep_results_equal() -> None:
    job = llm_job(dp=4, tp=2, pp=2)
    network, system, _ = load_config(preset="hgx-h100")
    slow = assert_same_as_every_rank(job, network, system, stragglers={9: 1.5})
    # rank 9 (stage 1, replica 0) stands alone and its partners split off; so do the others: a
    # collective is not a barrier, and where a member sits in a ring relative to the slow one changes
    # when its messages come (every rank equals the rank-by-rank run, checked above)
    assert 2 < slow.classes <= 16
    job = llm_job(dp=2, tp=2, pp=2)
    aware = assert_same_as_every_rank(job, network, system, congestion="aware")
    # every group is one stage's: its members' links carry the same traffic, folded onto the first rank's
    assert aware.classes == 2


def test_classes_are_walked_as_their_first_rank() -> None:
    job = llm_job(dp=2, tp=2, pp=2)
    network, system, _ = load_config(preset="hgx-h100")
    classes = rank_classes(job, system, Knobs(), network.with_npus(8))
    first = {c.rank for c in classes}
    for c in classes:
        assert c.ranks[0] == min(c.ranks)
        peers = set(c.program.comm_peer) - {-1}
        assert peers <= first  # the engine matches the first rank's messages with other first ranks
    without = rank_classes(job, system, Knobs(), None)
    assert len(without) == 8  # no network to compare positions on: ranks with peers stay apart
    assert len(rank_classes(job, system, replace(Knobs(), symmetry=False), network.with_npus(8))) == 8
