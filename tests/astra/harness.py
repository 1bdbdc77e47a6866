"""Differential harness: the same ETs and config files through the real ASTRA-sim and ``etkit simulate``.

The pieces, each usable on its own (the export tests use the runner)::

    from tests.astra.harness import NetworkSpec, write_system, run_astra, run_etkit, compare
    NetworkSpec(("Switch",), (8,), (50.0,), (500.0,)).write(tmp / "net.yml")
    write_system(tmp / "sys.json", {"preferred-dataset-splits": 4})
    ref = run_astra(prefix, tmp / "net.yml", tmp / "sys.json", comm_groups=None, aware=False)
    ref.finish            # {rank: ns} from ASTRA-sim's "sys[R] finished, T cycles" lines
    ours = run_etkit(prefix, tmp / "net.yml", tmp / "sys.json", aware=False)
    compare(ref.finish, ours).max_rel   # worst relative error over every rank

Workloads are written with etkit's own writers (:class:`~etkit.format.stream.TraceWriter`, the
generators); :class:`Case` bundles a workload with its configs, :func:`run_case` runs both simulators
on it. ASTRA-sim's behaviour this relies on (its README): one line per rank, 1 cycle = 1 ns, exit 134
on an assertion, 255 on a config error, and sometimes a crash at exit after every rank printed its
line (the lines count, not the exit status). A run that prints fewer lines than ranks did not finish
(a hang ends at ``timeout``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etkit.format.attrs import make_attr
from etkit.format.schema import CommType, GlobalMetadata, Node, NodeType
from etkit.format.stream import TraceWriter

__all__ = ["ASTRA_SIM", "NetworkSpec", "AstraRun", "Comparison", "Case", "CaseResult", "write_system",
           "write_comm_groups", "run_astra", "run_etkit", "compare", "parse_finish", "run_case", "run_cases",
           "RankNodes", "write_job", "comp_node", "coll_node", "send_node", "recv_node", "ASTRA_SYSTEM_DEFAULTS"]

REPO = Path(__file__).resolve().parents[2]
#: The real ASTRA-sim analytical simulator (both backends), prebuilt (``--aware`` selects congestion-aware).
ASTRA_SIM = REPO.parent / "shared" / "tools" / "astra-sim" / "astra-sim"

#: The system keys ASTRA-sim needs; a case overrides what it varies.
ASTRA_SYSTEM_DEFAULTS: dict[str, Any] = {
    "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 1, "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
    "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"],
    "collective-optimization": "localBWAware", "local-mem-bw": 1600, "boost-mode": 0, "roofline-enabled": 0,
    "peak-perf": 900,
}

_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles")


# -- configs --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NetworkSpec:
    """An ASTRA-sim analytical network: one entry per dimension."""

    topology: tuple[str, ...]
    npus: tuple[int, ...]
    bandwidth: tuple[float, ...]  # GB/s per link
    latency: tuple[float, ...]  # ns per hop

    @property
    def total(self) -> int:
        out = 1
        for n in self.npus:
            out *= n
        return out

    def text(self) -> str:
        def row(values: Iterable) -> str:
            return "[ " + ", ".join(str(v) for v in values) + " ]"
        return (f"topology: {row(self.topology)}\nnpus_count: {row(self.npus)}\n"
                f"bandwidth: {row(self.bandwidth)}\nlatency: {row(self.latency)}\n")

    def write(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.write_text(self.text())
        return path


def write_system(path: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None) -> Path:
    """An ASTRA-sim system JSON: :data:`ASTRA_SYSTEM_DEFAULTS` with ``overrides``."""
    path = Path(path)
    path.write_text(json.dumps({**ASTRA_SYSTEM_DEFAULTS, **(overrides or {})}, indent=1))
    return path


def write_comm_groups(path: str | os.PathLike[str], groups: Mapping[str, Sequence[int]]) -> Path:
    """ASTRA-sim's comm-group JSON ``{"<id>": [ranks]}`` (ids from 1: ASTRA-sim reserves 0)."""
    bad = [k for k in groups if not str(k).isdigit() or int(k) < 1]
    if bad:
        raise ValueError(f"ASTRA-sim needs group ids >= 1, got {bad}")
    path = Path(path)
    path.write_text(json.dumps({str(k): list(v) for k, v in groups.items()}))
    return path


# -- running ---------------------------------------------------------------------------------------

@dataclass
class AstraRun:
    """One ASTRA-sim run: per-rank finish and exposed-communication cycles (= ns) from its output."""

    finish: dict[int, int]
    exposed: dict[int, int]
    returncode: int
    output_tail: str
    timed_out: bool = False
    wall_s: float = 0.0

    def complete(self, npus: int) -> bool:
        """Every rank printed its line (an exit crash after that does not matter)."""
        return sorted(self.finish) == list(range(npus))


def parse_finish(text: str) -> tuple[dict[int, int], dict[int, int]]:
    """(finish, exposed communication) per rank from ASTRA-sim's output."""
    finish, exposed = {}, {}
    for m in _FINISHED.finditer(text):
        finish[int(m.group(1))] = int(m.group(2))
        exposed[int(m.group(1))] = int(m.group(3))
    return finish, exposed


def run_astra(prefix: str | os.PathLike[str], network: str | os.PathLike[str], system: str | os.PathLike[str], *,
              comm_groups: str | os.PathLike[str] | None = None, aware: bool = False, timeout: float = 120.0,
              binary: str | os.PathLike[str] = ASTRA_SIM, extra: Sequence[str] = (), npus: int | None = None,
              retries: int = 4) -> AstraRun:
    """Run ASTRA-sim on ``PREFIX.<rank>.et`` (its own logs go to a temporary folder). Its output is line
    buffered (``stdbuf``) so that a crash loses no line; a run that crashes before every one of
    ``npus`` ranks (default: one per ``PREFIX.<rank>.et``) printed its line is run again up to
    ``retries`` times (this build now and then corrupts its heap mid-run, depending on addresses)."""
    if npus is None:
        npus = len(list(Path(str(prefix)).parent.glob(Path(str(prefix)).name + ".*.et")))
    for _ in range(retries + 1):
        run = _run_astra_once(prefix, network, system, comm_groups, aware, timeout, binary, extra)
        if run.complete(npus) or run.timed_out or run.returncode not in (134, 139, -6, -11):
            return run
    return run


def _run_astra_once(prefix, network, system, comm_groups, aware, timeout, binary, extra) -> AstraRun:  # type: ignore[no-untyped-def]
    import shutil
    import time

    with tempfile.TemporaryDirectory(prefix="astra-log-") as logs:
        stdbuf = shutil.which("stdbuf")
        args = [*([stdbuf, "-oL", "-eL"] if stdbuf else []), str(binary), *(["--aware"] if aware else []),
                f"--workload-configuration={prefix}",
                f"--system-configuration={system}", f"--network-configuration={network}",
                f"--logging-folder={logs}", *extra]
        if comm_groups is not None:
            args.append(f"--comm-group-configuration={comm_groups}")
        began = time.perf_counter()
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, errors="replace")
            out, rc, timed_out = proc.stdout + proc.stderr, proc.returncode, False
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            rc, timed_out = -9, True
        wall = time.perf_counter() - began
    finish, exposed = parse_finish(out)
    return AstraRun(finish, exposed, rc, out[-2000:], timed_out, wall)


def run_etkit(prefix: str | os.PathLike[str], network: str | os.PathLike[str], system: str | os.PathLike[str], *,
              comm_groups: str | os.PathLike[str] | None = None, aware: bool = False) -> dict[int, float]:
    """``etkit simulate`` (the library function) on the same files: finish ns per rank."""
    from etkit.simulate import simulate

    result = simulate(str(prefix), network, system, congestion="aware" if aware else "unaware",
                      comm_groups=comm_groups)
    return {r: f.finish_ns for r, f in result.ranks.items()}


@dataclass(frozen=True)
class Comparison:
    """Per-rank relative errors of ``ours`` against ``ref`` (``missing``: ranks only one side has)."""

    rel: dict[int, float]
    missing: tuple[int, ...] = ()

    @property
    def max_rel(self) -> float:
        return float("inf") if self.missing else max(self.rel.values(), default=0.0)

    def worst(self) -> tuple[int, float] | None:
        return max(self.rel.items(), key=lambda kv: kv[1]) if self.rel else None


def compare(ref: Mapping[int, float], ours: Mapping[int, float]) -> Comparison:
    rel = {r: abs(ours[r] - t) / max(abs(t), 1.0) for r, t in ref.items() if r in ours}
    missing = tuple(sorted(set(ref) ^ set(ours)))
    return Comparison(rel, missing)


# -- workloads -------------------------------------------------------------------------------------

RankNodes = dict[int, list[Node]]


def comp_node(nid: int, us: int, deps: Sequence[int] = (), *, cpu: bool = False, num_ops: int | None = None,
              tensor_size: int | None = None) -> Node:
    node = Node(id=nid, name=f"comp_{nid}", type=NodeType.COMP_NODE, duration_micros=us, data_deps=list(deps),
                attr=[make_attr("is_cpu_op", cpu)])
    if num_ops is not None:
        node.attr.append(make_attr("num_ops", num_ops))
    if tensor_size is not None:
        node.attr.append(make_attr("tensor_size", tensor_size))
    return node


def coll_node(nid: int, comm_type: int, size: int, deps: Sequence[int] = (), pg: str | None = None) -> Node:
    attrs = [make_attr("is_cpu_op", False), make_attr("comm_type", int(comm_type)), make_attr("comm_size", size)]
    if pg is not None:
        attrs.append(make_attr("pg_name", pg))
    return Node(id=nid, name=f"{CommType(comm_type).name.lower()}_{nid}", type=NodeType.COMM_COLL_NODE,
                data_deps=list(deps), attr=attrs)


def _p2p(kind: NodeType, nid: int, size: int, src: int, dst: int, tag: int, deps: Sequence[int]) -> Node:
    attrs = [make_attr("is_cpu_op", False), make_attr("comm_size", size), make_attr("comm_src", src),
             make_attr("comm_dst", dst), make_attr("comm_tag", tag)]
    name = "send" if kind == NodeType.COMM_SEND_NODE else "recv"
    return Node(id=nid, name=f"{name}_{nid}", type=kind, data_deps=list(deps), attr=attrs)


def send_node(nid: int, size: int, src: int, dst: int, tag: int, deps: Sequence[int] = ()) -> Node:
    return _p2p(NodeType.COMM_SEND_NODE, nid, size, src, dst, tag, deps)


def recv_node(nid: int, size: int, src: int, dst: int, tag: int, deps: Sequence[int] = ()) -> Node:
    return _p2p(NodeType.COMM_RECV_NODE, nid, size, src, dst, tag, deps)


def write_job(prefix: str | os.PathLike[str], per_rank: RankNodes) -> str:
    """Write ``PREFIX.<rank>.et`` for every rank (etkit's TraceWriter); returns the prefix."""
    meta = GlobalMetadata(version="0.0.4")
    for rank, nodes in per_rank.items():
        with TraceWriter(f"{prefix}.{rank}.et", meta) as writer:
            for node in nodes:
                writer.write(node)
    return str(prefix)


# -- cases -----------------------------------------------------------------------------------------

@dataclass
class Case:
    """A workload (written by ``build(prefix)``, which returns its comm groups or None) and its configs."""

    name: str
    network: NetworkSpec
    system: dict[str, Any]
    build: Callable[[str], Mapping[str, Sequence[int]] | None]
    aware: bool = False
    #: a prefix (and comm-group file) that already exists, instead of ``build``
    prefix: str | None = None
    comm_groups: str | None = None
    tags: dict[str, Any] = field(default_factory=dict)


@dataclass
class CaseResult:
    case: Case
    ref: AstraRun
    ours: dict[int, float] | None
    error: str | None = None

    @property
    def comparison(self) -> Comparison | None:
        return compare(self.ref.finish, self.ours) if self.ours is not None else None

    @property
    def max_rel(self) -> float:
        cmp = self.comparison
        return cmp.max_rel if cmp is not None else float("inf")

    def describe(self) -> str:
        if self.error:
            return f"{self.case.name}: etkit raised {self.error}"
        if not self.ref.complete(self.case.network.total):
            return f"{self.case.name}: ASTRA-sim did not finish (rc {self.ref.returncode}): {self.ref.output_tail[-300:]}"
        worst = self.comparison.worst()
        return (f"{self.case.name}: max error {self.max_rel:.3%} at rank {worst[0]} "
                f"(ASTRA-sim {self.ref.finish[worst[0]]:,} ns, etkit {self.ours[worst[0]]:,.0f} ns)")


def prepare(case: Case, folder: str | os.PathLike[str]) -> tuple[str, Path, Path, str | None]:
    """Write the case's files into ``folder``: (prefix, network, system, comm groups or None)."""
    folder = Path(folder)
    net = case.network.write(folder / "net.yml")
    sys_path = write_system(folder / "sys.json", case.system)
    if case.prefix is not None:
        return case.prefix, net, sys_path, case.comm_groups
    prefix = str(folder / "job")
    groups = case.build(prefix)
    cg = str(write_comm_groups(folder / "groups.json", groups)) if groups else None
    return prefix, net, sys_path, cg


def run_case(case: Case, folder: str | os.PathLike[str] | None = None, *, timeout: float = 120.0) -> CaseResult:
    """Both simulators on one case (in ``folder``, else a temporary one)."""
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="astra-case-") as tmp:
            return run_case(case, tmp, timeout=timeout)
    prefix, net, sys_path, cg = prepare(case, folder)
    ref = run_astra(prefix, net, sys_path, comm_groups=cg, aware=case.aware, timeout=timeout, npus=case.network.total)
    try:
        ours = run_etkit(prefix, net, sys_path, comm_groups=cg, aware=case.aware)
        return CaseResult(case, ref, ours)
    except Exception as exc:  # the harness reports, the test decides
        return CaseResult(case, ref, None, f"{type(exc).__name__}: {exc}".splitlines()[0])


def run_cases(cases: Sequence[Case], *, workers: int = 2, timeout: float = 120.0) -> list[CaseResult]:
    """:func:`run_case` over ``cases``, ASTRA-sim runs ``workers`` at a time (the machine is shared)."""
    if workers <= 1:
        return [run_case(c, timeout=timeout) for c in cases]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda c: run_case(c, timeout=timeout), cases))
