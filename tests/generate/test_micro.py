"""The micro-benchmark cases: same kinds as the reference generator, p2p pairs that match, real semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from etkit.cli.main import main
from etkit.errors import UsageError
from etkit.format.attrs import attr_kind, attrs_dict
from etkit.format.schema import ATTR_KINDS, CommType, NodeType
from etkit.generate import MICRO_CASES, micro, write_micro
from etkit.model import load_job, load_trace
from etkit.validate import validate, validate_job

from ..conftest import UPSTREAM
from .p2p_checks import assert_sends_match_recvs, ranks_before_end

REFERENCE = UPSTREAM / "generated-by-upstream-chakra-21585d8" / "generator_npus2"
#: Cases whose reference form simulators cannot run, rewritten as SEND/RECV.
LOWERED = {"BROADCAST", "BARRIER"}
P2P_CASES = ("one_comm_send_node", "one_comm_recv_node", "BROADCAST", "BARRIER")


@pytest.fixture(scope="module")
def jobs_by_npus() -> dict[int, dict]:
    return {n: micro(n) for n in (2, 3, 5, 8)}


def _kinds(trace) -> list[tuple[int, dict[str, str]]]:
    return [(n.type, {a.name: attr_kind(a) for a in n.attr}) for n in trace.nodes()]


def test_fourteen_cases_with_reference_names() -> None:
    assert len(MICRO_CASES) == 14
    if REFERENCE.is_dir():
        reference_cases = {p.name.rsplit(".", 2)[0] for p in REFERENCE.glob("*.et")}
        assert set(MICRO_CASES) == reference_cases


@pytest.mark.shared_data
@pytest.mark.parametrize("case", sorted(set(MICRO_CASES) - LOWERED))
def test_node_and_attribute_kinds_match_reference(case: str, jobs_by_npus: dict) -> None:
    ours = jobs_by_npus[2][case]
    for rank in (0, 1):
        ref = _kinds(load_trace(REFERENCE / f"{case}.{rank}.et"))
        mine = _kinds(ours.traces[rank])
        if case.startswith("one_comm_"):
            # The reference puts a lone send (or recv) on every rank; ours pairs them across ranks, so
            # each reference node is compared with a node of the same type anywhere in the job.
            job_nodes = [k for r in (0, 1) for k in _kinds(ours.traces[r])]
            for ref_type, ref_attrs in ref:
                my_attrs = next(a for t, a in job_nodes if t == ref_type)
                assert all(my_attrs.get(name) == kind for name, kind in ref_attrs.items()), (case, ref_attrs)
            continue
        assert [t for t, _ in mine] == [t for t, _ in ref]
        for (_, ref_attrs), (_, my_attrs) in zip(ref, mine):
            for name, kind in ref_attrs.items():
                assert my_attrs.get(name) == kind, (case, name)


@pytest.mark.shared_data
def test_metadata_node_carries_every_value_kind_like_reference(jobs_by_npus: dict) -> None:
    node = next(jobs_by_npus[2]["one_metadata_node_all_types"].traces[0].nodes())
    assert node.type == NodeType.METADATA_NODE
    assert sorted(attr_kind(a) for a in node.attr) == sorted(ATTR_KINDS)
    ref = next(load_trace(REFERENCE / "one_metadata_node_all_types.0.et").nodes())
    assert attrs_dict(node.attr) == attrs_dict(ref.attr)


@pytest.mark.parametrize("npus", [2, 3, 5, 8])
def test_every_case_is_valid_across_ranks(npus: int, jobs_by_npus: dict) -> None:
    for case, job in jobs_by_npus[npus].items():
        assert sorted(job.traces) == list(range(npus))
        report = validate_job(job)
        assert report.ok, (case, [(f.rank, f.rule, f.message) for f in report.findings])


@pytest.mark.parametrize("npus", [2, 3, 5, 8])
def test_sends_and_recvs_pair_up(npus: int, jobs_by_npus: dict) -> None:
    for case in P2P_CASES:
        job = jobs_by_npus[npus][case]
        sends = assert_sends_match_recvs(job)
        assert sends, case
        for trace in job.traces.values():
            comm = np.isin(trace.types, [NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE])
            assert (trace.is_cpu_op[comm] == 0).all()


@pytest.mark.parametrize("npus", [2, 3, 5, 8])
def test_one_message_cases(npus: int, jobs_by_npus: dict) -> None:
    for case, sender_parity in (("one_comm_send_node", 0), ("one_comm_recv_node", 1)):
        job = jobs_by_npus[npus][case]
        sends = assert_sends_match_recvs(job)
        # One message per even rank and its right neighbour, in the direction the case names.
        expected = {(r, (r + 1) % npus) if sender_parity == 0 else ((r + 1) % npus, r) for r in range(0, npus, 2)}
        assert {(s, d) for s, d, _, _ in sends} == expected
        assert {size for *_, size in sends} == {1024}
        rank0 = job.traces[0]
        wanted = NodeType.COMM_SEND_NODE if case == "one_comm_send_node" else NodeType.COMM_RECV_NODE
        assert rank0.types[0] == wanted


@pytest.mark.parametrize("npus", [2, 3, 5, 8])
def test_broadcast_is_a_tree_from_rank_zero(npus: int, jobs_by_npus: dict) -> None:
    job = jobs_by_npus[npus]["BROADCAST"]
    sends = assert_sends_match_recvs(job)
    parent = {dst: src for src, dst, _, _ in sends}
    assert sorted(parent) == list(range(1, npus)), "every rank but the root receives exactly once"
    assert {size for *_, size in sends} == {65_536}
    depth = {0: 0}
    for rank in range(1, npus):
        chain, r = [], rank
        while r not in depth:
            chain.append(r)
            r = parent[r]
        for node in reversed(chain):
            depth[node] = depth[parent[node]] + 1
    # A binomial tree: no rank is more than ceil(log2 N) hops from the root, whose fan-out is that many.
    rounds = math.ceil(math.log2(npus))
    assert max(depth.values()) <= rounds
    assert sum(1 for src, *_ in sends if src == 0) == rounds
    seen = ranks_before_end(job)
    assert all(0 in seen[r] for r in range(npus))
    for rank, trace in job.traces.items():
        recv_rows = np.flatnonzero(trace.types == NodeType.COMM_RECV_NODE)
        for row in np.flatnonzero(trace.types == NodeType.COMM_SEND_NODE):
            if rank:  # a non-root forwards only what it received
                assert set(trace.deps_of(row)) == set(trace.ids[recv_rows])


@pytest.mark.parametrize("npus", [2, 3, 5, 8])
def test_barrier_lets_no_rank_leave_before_all_arrived(npus: int, jobs_by_npus: dict) -> None:
    job = jobs_by_npus[npus]["BARRIER"]
    sends = assert_sends_match_recvs(job)
    rounds = math.ceil(math.log2(npus))
    assert len(sends) == npus * rounds
    seen = ranks_before_end(job)
    assert all(seen[r] == set(range(npus)) for r in range(npus))


def test_collective_cases(jobs_by_npus: dict) -> None:
    for case in ("ALL_REDUCE", "ALL_TO_ALL", "ALL_GATHER", "REDUCE_SCATTER"):
        for trace in jobs_by_npus[3][case].traces.values():
            assert list(trace.types) == [NodeType.COMM_COLL_NODE]
            assert trace.comm_type[0] == CommType[case] and trace.comm_size[0] == 65_536
            assert trace.is_cpu_op[0] == 0


def test_compute_cases_have_roofline_inputs(jobs_by_npus: dict) -> None:
    dependent = jobs_by_npus[2]["two_comp_nodes_dependent"].traces[1]
    assert list(dependent.deps_of(1)) == [dependent.ids[0]]
    independent = jobs_by_npus[2]["two_comp_nodes_independent"].traces[0]
    assert len(independent.data_deps) == 0
    for trace in (dependent, independent):
        assert (trace.duration == 5).all()
        assert (trace.num_ops == 2 * 64**3).all() and (trace.tensor_size == 3 * 64 * 64 * 4).all()


def test_options_change_sizes() -> None:
    jobs = micro(4, cases=["ALL_REDUCE", "one_comm_send_node", "one_comp_node", "one_remote_mem_load_node"],
                 coll_size=1 << 20, p2p_size=4096, mem_size=77, comp_us=9)
    assert set(jobs) == {"ALL_REDUCE", "one_comm_send_node", "one_comp_node", "one_remote_mem_load_node"}
    assert jobs["ALL_REDUCE"].traces[3].comm_size[0] == 1 << 20
    assert jobs["one_comm_send_node"].traces[0].comm_size[0] == 4096
    assert jobs["one_comp_node"].traces[0].duration[0] == 9
    assert jobs["one_remote_mem_load_node"].traces[0].tensor_size[0] == 77


def test_bad_arguments() -> None:
    with pytest.raises(UsageError, match="at least 2"):
        micro(1)
    with pytest.raises(UsageError, match="unknown micro case"):
        micro(2, cases=["ALL_REDUCEX"])


def test_written_files_equal_the_in_memory_jobs(tmp_path) -> None:
    written = write_micro(tmp_path, 3)
    jobs = micro(3)
    assert set(written) == set(jobs)
    for case, paths in written.items():
        assert [p.name for p in paths] == [f"{case}.{r}.et" for r in range(3)]
        on_disk = load_job(tmp_path / case)
        for rank in range(3):
            assert list(on_disk.traces[rank].records()) == list(jobs[case].traces[rank].records())


def test_cli_writes_every_case(tmp_path, capsys) -> None:
    assert main(["generate", "micro", "--npus", "4", "-o", str(tmp_path), "-q", "-j", "1"]) == 0
    assert len(list(tmp_path.glob("*.et"))) == 14 * 4
    assert validate(tmp_path / "BARRIER").ok
    assert main(["generate", "micro", "--npus", "1", "-o", str(tmp_path), "-q"]) == 2
    assert "at least 2 NPUs" in capsys.readouterr().err
