"""Parallel layouts: Megatron rank order, process groups, pipeline schedules, gradient buckets."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from etkit.errors import UsageError
from etkit.generate.layout import GROUP_KINDS, ParallelLayout, build_groups, pipeline_order
from etkit.generate.training import GradientBuckets

from .test_llm import peak_in_flight


def test_megatron_rank_order() -> None:
    layout = ParallelLayout(dp=4, tp=2, pp=3, ep=2)
    seen = set()
    for pp_r, dp_r, tp_r in itertools.product(range(3), range(4), range(2)):
        rank = layout.rank_of(tp_r, dp_r, pp_r)
        assert rank == len(seen)  # tensor fastest, then data, then pipeline
        seen.add(rank)
        c = layout.coords(rank)
        assert (c.tp, c.dp, c.pp, c.ep, c.edp) == (tp_r, dp_r, pp_r, dp_r % 2, dp_r // 2)
    assert list(layout.stage_ranks(1)) == list(range(8, 16))


def test_groups_partition_ranks_as_defined() -> None:
    dp, tp, pp, ep = 4, 2, 3, 2
    layout = ParallelLayout(dp=dp, tp=tp, pp=pp, ep=ep)
    table = build_groups(layout)
    world = dp * tp * pp

    def expected(kind: str, r: int) -> set[int]:
        t, d, p = r % tp, (r // tp) % dp, r // (tp * dp)
        at = lambda t_, d_, p_: t_ + tp * (d_ + dp * p_)  # noqa: E731
        return {
            "tp": {at(i, d, p) for i in range(tp)},
            "dp": {at(t, j, p) for j in range(dp)},
            "ep": {at(t, d // ep * ep + j, p) for j in range(ep)},
            "edp": {at(t, d % ep + ep * j, p) for j in range(dp // ep)},
            "emb": {at(t, d, 0), at(t, d, pp - 1)},
        }[kind]

    names = set()
    for kind in GROUP_KINDS:
        kind_names = set()
        for r in range(world):
            name = table.name(kind, r)
            if kind == "emb" and 0 < r // (tp * dp) < pp - 1:
                assert name == ""
                continue
            assert set(table.groups.members(name, world)) == expected(kind, r)
            kind_names.add(name)
        assert not kind_names & names  # names never shared between kinds
        names |= kind_names
    assert names == set(table.groups.groups) and "0" not in names
    assert sorted(int(n) for n in names) == list(range(1, len(names) + 1))


def test_single_rank_dimensions_have_no_group() -> None:
    table = build_groups(ParallelLayout(dp=4, tp=1, pp=1))
    assert set(table.names) == {"dp"} and table.name("tp", 0) == ""
    assert table.groups.groups == {"1": (0, 1, 2, 3)}


@given(stages=st.integers(1, 8), microbatches=st.integers(1, 12), schedule=st.sampled_from(["1f1b", "gpipe"]))
def test_pipeline_order_properties(stages: int, microbatches: int, schedule: str) -> None:
    for stage in range(stages):
        order = pipeline_order(stage, stages, microbatches, schedule)
        assert sorted(order) == sorted(itertools.product("FB", range(microbatches)))
        assert [i for k, i in order if k == "F"] == list(range(microbatches))
        assert [i for k, i in order if k == "B"] == list(range(microbatches))
        assert peak_in_flight(order) == (min(stages - stage, microbatches) if schedule == "1f1b" else microbatches)
    if schedule == "1f1b":  # the last stage alternates from the start
        assert pipeline_order(stages - 1, stages, microbatches)[:2] == [("F", 0), ("B", 0)]


@given(sizes=st.lists(st.integers(1, 500), min_size=1, max_size=40), threshold=st.integers(1, 1000))
def test_gradient_buckets(sizes: list[int], threshold: int) -> None:
    buckets = GradientBuckets(threshold)
    closed = [b for i, s in enumerate(sizes) if (b := buckets.add(s, i)) is not None]
    tail = buckets.flush()
    assert sum(p for p, _ in closed) + (tail[0] if tail else 0) == sum(sizes)
    assert all(p >= threshold for p, _ in closed)
    assert tail is None or tail[0] < threshold
    assert tail is None or tail[1] == len(sizes) - 1


@pytest.mark.parametrize("kwargs", [dict(dp=0), dict(dp=3, ep=2), dict(sequence_parallel=True), dict(zero=5),
                                    dict(recompute="some"), dict(schedule="zb"), dict(bucket_mb=0)])
def test_bad_layouts(kwargs: dict) -> None:
    with pytest.raises(UsageError):
        ParallelLayout(**kwargs)
