"""etkit simulate against the real ASTRA-sim on the same files: every rank's finish within 0.1 %
(in practice: to the nanosecond) in both congestion modes.

Drawn cases (:func:`tests.astra.cases.random_case`, seeded) cover Ring / FullyConnected / Switch in
1-3 dimensions, every implementation ASTRA-sim takes per dimension, the four collectives from 4 KiB
to 64 MiB, splits, active chunks, LIFO/FIFO, localBWAware/baseline, endpoint delay, local-mem-bw,
chains whose ranks arrive at different times, concurrent collectives on groups, send/recv rings and
random mixes; fixed cases add STAGE's jobs, etkit's generators, ASTRA-sim's own examples and the
roofline. ``benchmarks/bench_astra_parity.py`` runs thousands more.
"""

from __future__ import annotations

import functools
import random

import pytest

from etkit.format.schema import CommType

from .cases import STAGE, UPSTREAM, chain, concurrent_groups, random_case
from .harness import Case, NetworkSpec, coll_node, comp_node, run_case, run_cases, write_job

pytestmark = pytest.mark.shared_data

TOLERANCE = 1e-3  # 0.1 % of every rank's finish time
EXAMPLES = UPSTREAM / "astra-sim-astra-sim" / "examples"


def check(results) -> None:
    failures = []
    for r in results:
        if not r.ref.complete(r.case.network.total):
            failures.append(f"{r.case.name}: ASTRA-sim did not finish (rc {r.ref.returncode}): {r.ref.output_tail[-200:]}")
        elif r.error or r.max_rel > TOLERANCE:
            failures.append(r.describe())
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("seed", range(6))
def test_drawn_cases_agree_on_every_rank(seed: int) -> None:
    rng = random.Random(1000 + seed)
    check(run_cases([random_case(rng, i) for i in range(30)], workers=2))


def _stage(name: str, network: NetworkSpec, aware: bool) -> Case:
    return Case(f"stage {name}", network, {"preferred-dataset-splits": 4}, lambda prefix: None, aware=aware,
                prefix=str(STAGE / name / "workload"), comm_groups=str(STAGE / name / "workload.json"))


@pytest.mark.parametrize("name", ["small_dp2tp2pp2", "fsdp_dp4_sp2", "tp4_pp2_recompute"])
def test_stage_jobs(name: str) -> None:
    check(run_cases([_stage(name, NetworkSpec(("Switch",), (8,), (50.0,), (500.0,)), False),
                     _stage(name, NetworkSpec(("Switch",), (8,), (50.0,), (500.0,)), True),
                     _stage(name, NetworkSpec(("Ring", "Switch"), (4, 2), (100.0, 25.0), (100.0, 1000.0)), False)]))


def _generated(kind: str, npus: int, network: NetworkSpec, aware: bool, **options) -> Case:
    def build(prefix: str):
        import json
        from pathlib import Path

        from etkit.executor import SerialExecutor

        if kind == "llm":
            from etkit.generate.llm import llm

            job = llm("llama3-8b", layers=2, microbatches=2, **options)
        else:
            from etkit.generate.dlrm import dlrm

            job = dlrm("dlrm-small", npus=npus, **options)
        job.write(prefix, executor=SerialExecutor())
        groups = Path(f"{prefix}.comm_groups.json")
        return json.loads(groups.read_text()) if groups.exists() else None
    return Case(f"generate {kind} {npus} {options}", network, {"preferred-dataset-splits": 4}, build, aware=aware)


def test_generated_jobs() -> None:
    switch16 = NetworkSpec(("Switch",), (16,), (50.0,), (500.0,))
    two_dim = NetworkSpec(("FullyConnected", "Ring"), (4, 4), (400.0, 50.0), (100.0, 500.0))
    check(run_cases([_generated("llm", 16, switch16, False, dp=2, tp=4, pp=2),
                     _generated("llm", 16, switch16, True, dp=2, tp=4, pp=2),
                     _generated("llm", 16, two_dim, False, dp=2, tp=4, pp=2),
                     _generated("dlrm", 8, NetworkSpec(("Switch",), (8,), (50.0,), (500.0,)), True),
                     _generated("dlrm", 16, NetworkSpec(("Ring", "Switch"), (8, 2), (100.0, 25.0), (100.0, 1000.0)), False)]))


def test_astra_sims_own_examples() -> None:
    ring8 = NetworkSpec(("Ring",), (8,), (50.0,), (500.0,))
    custom = str(EXAMPLES / "system" / "custom_collectives" / "custom_ring_allreduce_8npus_1MB" / "custom_allreduce")
    micro = EXAMPLES / "workload" / "microbenchmarks"
    cases = [Case("custom ring", ring8, {"preferred-dataset-splits": 4}, lambda p: None, aware=aware, prefix=custom)
             for aware in (False, True)]
    for coll in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        for aware in (False, True):
            cases.append(Case(f"micro {coll}", ring8, {"preferred-dataset-splits": 4}, lambda p: None, aware=aware,
                              prefix=str(micro / coll / "8npus_1MB" / coll)))
    check(run_cases(cases))


def test_ranks_arriving_apart_on_two_dimensions_finish_apart() -> None:
    """Half the ranks arrive 78 us early. With one implementation per dimension the collective spans
    the network; with one listed for two dimensions, ASTRA-sim runs it in dimension 0 only, and the
    early half finishes long before the late half arrives."""
    net = NetworkSpec(("Ring", "Switch"), (8, 2), (100.0, 25.0), (100.0, 1000.0))
    cases = []
    for ct in (CommType.ALL_REDUCE, CommType.ALL_TO_ALL, CommType.REDUCE_SCATTER, CommType.ALL_GATHER):
        for impls in (["ring"], ["ring", "direct"]):
            keys = {f"{k}-implementation": impls for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}
            for aware in (False,):
                cases.append(Case(f"apart {ct.name} {impls}", net, {"preferred-dataset-splits": 4, **keys},
                                  functools.partial(chain, npus=16, steps=[(ct, 1 << 20)] * 2, comp_us=[126] * 8 + [48] * 8),
                                  aware=aware))
    check(run_cases(cases))


def test_groups_of_every_shape_at_once() -> None:
    cases = []
    for topo in ("Ring", "Switch", "FullyConnected"):
        for groups in ([[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 2, 4, 6], [1, 3, 5, 7]], [[0, 5, 2, 7], [4, 1, 6, 3]]):
            for aware in (False, True):
                cases.append(Case(f"groups {topo} {groups}", NetworkSpec((topo,), (8,), (50.0,), (500.0,)),
                                  {"preferred-dataset-splits": 2},
                                  functools.partial(concurrent_groups, npus=8, groups=groups,
                                                    steps=[(CommType.ALL_REDUCE, 1 << 20), (CommType.ALL_TO_ALL, 1 << 18)],
                                                    comp_us=[5, 9, 13]), aware=aware))
    check(run_cases(cases))


def _roofline(prefix: str, npus: int, seed: int) -> None:
    rng = random.Random(seed)
    per = {}
    for r in range(npus):
        nodes, prev = [], []
        for i in range(5):
            nodes.append(comp_node(2 * i, rng.randint(0, 20), prev, cpu=i == 3, num_ops=rng.choice([10**6, 10**9, 3 * 10**11]),
                                   tensor_size=rng.choice([4096, 1 << 20, 1 << 28])))
            nodes.append(coll_node(2 * i + 1, CommType.ALL_REDUCE, 1 << 16, [2 * i]))
            prev = [2 * i + 1]
        per[r] = nodes
    write_job(prefix, per)


@pytest.mark.parametrize("roofline", [0, 1])
def test_roofline_on_and_off(roofline: int) -> None:
    cases = [Case(f"roofline {roofline} {seed}", NetworkSpec(("Switch",), (4,), (50.0,), (500.0,)),
                  {"roofline-enabled": roofline, "peak-perf": (100, 900)[seed % 2], "local-mem-bw": (50, 1600)[seed // 2 % 2]},
                  functools.partial(_roofline, npus=4, seed=seed), aware=seed % 2 == 1) for seed in range(4)]
    check(run_cases(cases))


def test_a_failing_case_is_reported_with_its_worst_rank() -> None:
    """The harness itself: a wrong etkit result is a failure that names the case and the rank."""
    net = NetworkSpec(("Ring",), (4,), (50.0,), (500.0,))
    case = Case("single", net, {}, lambda prefix: write_job(prefix, {r: [coll_node(1, CommType.ALL_REDUCE, 1 << 20)]
                                                                   for r in range(4)}) and None)
    result = run_case(case)
    assert result.max_rel == 0.0
    result.ours = {r: t * 1.01 for r, t in result.ours.items()}
    with pytest.raises(AssertionError, match=r"single: max error 1\.000% at rank"):
        check([result])
