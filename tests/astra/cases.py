"""Cases for the differential harness: workloads (single collectives, chains, concurrent groups,
send/recv, generated jobs, STAGE's jobs) on drawn networks and systems.

:func:`random_case` draws one case from a seeded :class:`random.Random` (the property-based mode);
the workload builders write ``PREFIX.<rank>.et`` with etkit's writers and return the comm groups.
Everything drawn stays inside what ASTRA-sim runs: ``endpoint-delay`` >= 1 (0 trips an assertion in
its event queue), power-of-two groups for halving-doubling and the double binary tree (its trees are
built for powers of two), at least one byte per NPU and chunk.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

from etkit.format.schema import CommType

from .harness import ASTRA_SYSTEM_DEFAULTS, Case, NetworkSpec, coll_node, comp_node, recv_node, send_node, write_job

__all__ = ["TOPOLOGIES", "ALGORITHMS", "COLLECTIVES", "random_network", "random_system", "random_case",
           "single", "chain", "concurrent_groups", "ring_sendrecv", "mixed", "STAGE", "UPSTREAM"]

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = REPO.parent / "shared" / "data" / "upstream"
STAGE = UPSTREAM / "generated-by-stage-3a7f49c"

TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
ALGORITHMS = ("ring", "direct", "halvingDoubling", "doubleBinaryTree", "oneRing", "oneDirect", "direct2",
              "oneHalvingDoubling")
COLLECTIVES = (CommType.ALL_REDUCE, CommType.ALL_GATHER, CommType.REDUCE_SCATTER, CommType.ALL_TO_ALL)
SIZES = (4 << 10, 64 << 10, 1 << 20, 3 << 20, (1 << 20) + 4096 * 3, 16 << 20, 64 << 20, 256 << 20)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


# -- workloads -------------------------------------------------------------------------------------

def single(prefix: str, npus: int, comm_type: int, size: int) -> None:
    """One collective on every rank (the default group)."""
    write_job(prefix, {r: [coll_node(1, comm_type, size)] for r in range(npus)})


def chain(prefix: str, npus: int, steps: Sequence[tuple[int, int]], comp_us: Sequence[int] | int = 10,
          pg: Mapping[int, str] | None = None, groups: Mapping[str, Sequence[int]] | None = None):
    """Per rank ``COMP -> COLL`` for each ``(comm_type, size)`` of ``steps``; ``comp_us`` per rank (a list:
    ranks arrive at different times); ``pg`` gives a rank's ``pg_name``."""
    per = {}
    for r in range(npus):
        us = comp_us if isinstance(comp_us, int) else comp_us[r % len(comp_us)]
        nodes, prev = [], None
        for i, (ct, size) in enumerate(steps):
            nodes.append(comp_node(2 * i, us, [prev] if prev is not None else []))
            nodes.append(coll_node(2 * i + 1, ct, size, [2 * i], (pg or {}).get(r)))
            prev = 2 * i + 1
        per[r] = nodes
    write_job(prefix, per)
    return dict(groups) if groups else None


def concurrent_groups(prefix: str, npus: int, groups: Sequence[Sequence[int]], steps: Sequence[tuple[int, int]],
                      comp_us: Sequence[int] | int = 10):
    """Every group runs its own chain at the same time (``pg_name`` "1", "2", ...)."""
    named = {str(i + 1): list(g) for i, g in enumerate(groups)}
    pg = {r: name for name, g in named.items() for r in g}
    return chain(prefix, npus, steps, comp_us, pg, named)


def ring_sendrecv(prefix: str, npus: int, size: int, rounds: int, comp_us: int = 5):
    """A ring of SEND/RECV rounds like ASTRA-sim's custom ring all-reduce example: each round sends
    to the next rank and receives from the previous, then computes."""
    per = {}
    for r in range(npus):
        nodes, prev, nid = [], [], 0
        for k in range(rounds):
            s = send_node(nid, size, r, (r + 1) % npus, k, prev)
            v = recv_node(nid + 1, size, (r - 1) % npus, r, k, prev)
            c = comp_node(nid + 2, comp_us, [nid, nid + 1])
            nodes += [s, v, c]
            prev = [nid + 2]
            nid += 3
        per[r] = nodes
    write_job(prefix, per)
    return None


def mixed(prefix: str, npus: int, rng: random.Random, ops: int = 6):
    """A random DAG per rank (the same on every rank, different compute times): compute, collectives
    on the default group or on two halves, and pairwise send/recv between neighbours."""
    half = npus // 2
    groups = {"1": list(range(half)), "2": list(range(half, npus))} if npus >= 4 else {}
    plan = []
    for _ in range(ops):
        what = rng.choice(["coll", "coll", "group", "p2p", "comp"]) if groups else rng.choice(["coll", "p2p", "comp"])
        plan.append((what, rng.choice(COLLECTIVES), rng.choice(SIZES[:5]), rng.randint(1, 40)))
    per = {}
    for r in range(npus):
        nodes, prev, nid = [], [], 0
        for k, (what, ct, size, us) in enumerate(plan):
            if what == "comp":
                nodes.append(comp_node(nid, us * (1 + r % 3), prev))
                prev, nid = [nid], nid + 1
            elif what == "coll":
                nodes.append(coll_node(nid, ct, size, prev))
                prev, nid = [nid], nid + 1
            elif what == "group":
                nodes.append(coll_node(nid, ct, size, prev, "1" if r < half else "2"))
                prev, nid = [nid], nid + 1
            else:
                peer_to, peer_from = r ^ 1, r ^ 1
                if peer_to >= npus:
                    continue
                nodes.append(send_node(nid, size, r, peer_to, k, prev))
                nodes.append(recv_node(nid + 1, size, peer_from, r, k, prev))
                prev, nid = [nid, nid + 1], nid + 2
        per[r] = nodes
    write_job(prefix, per)
    return groups or None


# -- configs ---------------------------------------------------------------------------------------

def random_network(rng: random.Random, dims: int | None = None, max_npus: int = 64) -> NetworkSpec:
    d = dims or rng.choice((1, 1, 2, 2, 3))
    npus = [rng.choice((2, 4, 8, 16) if d == 1 else (2, 2, 4, 4, 8)) for _ in range(d)]
    while math.prod(npus) > max_npus:
        npus[rng.randrange(d)] = 2
    return NetworkSpec(tuple(rng.choice(TOPOLOGIES) for _ in range(d)), tuple(npus),
                       tuple(rng.choice((12.5, 25.0, 50.0, 100.0, 400.0)) for _ in range(d)),
                       tuple(rng.choice((1.0, 100.0, 500.0, 2000.0)) for _ in range(d)))


def random_system(rng: random.Random, network: NetworkSpec, subgroups: bool = False) -> dict:
    """Drawn system keys. With ``subgroups`` (the workload runs collectives on smaller groups, which
    ASTRA-sim runs on one ring of their own), no lone double binary tree: ASTRA-sim takes the group's
    ring for a tree and crashes."""
    def impls(kind: str) -> list[str]:
        out = []
        for n in network.npus:
            names = [a for a in ("ring", "ring", "direct", "direct2", "halvingDoubling", "doubleBinaryTree")
                     if (a not in ("halvingDoubling", "doubleBinaryTree") or _pow2(n))
                     and not (kind == "a2a" and a == "halvingDoubling")
                     ]
            out.append(rng.choice(names))
        if rng.random() < 0.08:  # a one-ring over every NPU instead
            total = network.total
            out = [rng.choice(["oneRing", "oneDirect"] + (["oneHalvingDoubling"] if _pow2(total) and kind != "a2a" else []))]
        if subgroups and len(out) == 1 and out[0] == "doubleBinaryTree":
            out = ["ring"]
        return out

    return {"all-reduce-implementation": impls("ar"), "all-gather-implementation": impls("ag"),
            "reduce-scatter-implementation": impls("rs"), "all-to-all-implementation": impls("a2a"),
            "preferred-dataset-splits": rng.choice((1, 2, 4, 8, 16)),
            "active-chunks-per-dimension": rng.choice((1, 1, 2, 4)),
            "collective-optimization": rng.choice(("localBWAware", "baseline")),
            "scheduling-policy": rng.choice(("LIFO", "FIFO")),
            "endpoint-delay": rng.choice((1, 10, 100)), "local-mem-bw": rng.choice((50, 1600, 3350)),
            "roofline-enabled": 0}


def random_case(rng: random.Random, index: int = 0, *, aware: bool | None = None) -> Case:
    """One drawn case: a network (1-3 dimensions; aware: 1), a system and a workload."""
    aware = rng.random() < 0.5 if aware is None else aware
    network = random_network(rng, 1 if aware else None)
    if aware and network.topology[0] == "Ring" and network.npus[0] == 2:  # ASTRA-sim links 0-1 twice and asserts
        network = NetworkSpec(("Ring",), (4,), network.bandwidth, network.latency)
    kind = rng.choice(("single", "single", "single", "chain", "concurrent", "mixed", "sendrecv"))
    system = random_system(rng, network, subgroups=kind in ("concurrent", "mixed"))
    n = network.total
    ct = rng.choice(COLLECTIVES)
    size = rng.choice(SIZES)
    if kind == "single":
        build = partial(single, npus=n, comm_type=ct, size=size)
    elif kind == "chain":
        steps = [(rng.choice(COLLECTIVES), rng.choice(SIZES[:5])) for _ in range(rng.randint(2, 4))]
        comp = [rng.randint(1, 30) for _ in range(rng.choice((1, 3)))]
        build = partial(chain, npus=n, steps=steps, comp_us=comp)
    elif kind == "concurrent" and n >= 4:
        k = rng.choice([g for g in (2, 4) if n % g == 0 and n // g >= 2])
        if rng.random() < 0.5:
            groups = [list(range(i * (n // k), (i + 1) * (n // k))) for i in range(k)]
        else:
            groups = [list(range(i, n, k)) for i in range(k)]
        steps = [(rng.choice(COLLECTIVES), rng.choice(SIZES[:5])) for _ in range(rng.randint(1, 3))]
        build = partial(concurrent_groups, npus=n, groups=groups, steps=steps, comp_us=[rng.randint(1, 20)])
    elif kind == "mixed":
        build = partial(mixed, npus=n, rng=random.Random(rng.random()))
    else:
        build = partial(ring_sendrecv, npus=n, size=rng.choice(SIZES[:5]), rounds=rng.randint(1, 4))
        kind = "sendrecv"
    name = f"{index}:{kind}:{'aware' if aware else 'unaware'}:{'x'.join(f'{t[0]}{p}' for t, p in zip(network.topology, network.npus))}"
    return Case(name, network, system, lambda prefix, b=build: b(prefix), aware=aware,
                tags={"kind": kind, "dims": len(network.npus)})


def system_with(**keys) -> dict:
    """ASTRA-sim system keys written the JSON way (``preferred_dataset_splits=4`` -> ``preferred-dataset-splits``)."""
    return {**ASTRA_SYSTEM_DEFAULTS, **{k.replace("_", "-"): v for k, v in keys.items()}}
