"""Generated DLRM steps: embedding all-to-all and MLP all-reduce volumes, FLOPs, roles, validity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from etkit.cli.main import main
from etkit.errors import UsageError
from etkit.format.schema import CommType, NodeType
from etkit.generate import dlrm
from etkit.validate import validate, validate_job

from .test_llm import assert_no_deadlock

# MLPerf DLRM (Criteo 1TB), written out by hand: 13 dense features, 26 tables of width 128.
BOTTOM = [(13, 512), (512, 256), (256, 128)]
TOP_IN = 128 + 27 * 26 // 2  # bottom output + one dot product per pair of the 27 vectors
TOP = [(TOP_IN, 1024), (1024, 1024), (1024, 512), (512, 256), (256, 1)]


def comm(trace, comm_type: CommType) -> np.ndarray:  # noqa: ANN001
    return trace.comm_size[(trace.types == NodeType.COMM_COLL_NODE) & (trace.comm_type == comm_type)]


@pytest.mark.parametrize("npus", [4, 8, 26, 32])
def test_volumes_match_the_hybrid_layout(npus: int) -> None:
    batch = 1024
    job = dlrm("dlrm-mlperf", npus=npus, batch=batch).to_job()
    tables_per_rank = math.ceil(26 / npus)
    mlp_params = sum(i * o + o for i, o in BOTTOM + TOP)
    for trace in job.traces.values():
        # forward pooled embeddings and backward gradients: the global batch of the (padded) local tables
        assert comm(trace, CommType.ALL_TO_ALL).tolist() == [npus * batch * tables_per_rank * 128 * 4] * 2
        assert int(comm(trace, CommType.ALL_REDUCE).sum()) == mlp_params * 4  # fp32 gradients, all ranks
        assert set(trace.pg_names()[trace.types == NodeType.COMM_COLL_NODE]) == {"1"}
    assert job.groups.groups == {"1": tuple(range(npus))}


def test_flops_of_mlps_interaction_and_lookups() -> None:
    npus, batch = 8, 512
    job = dlrm("dlrm-mlperf", npus=npus, batch=batch).to_job()
    mlp = 6 * batch * sum(i * o for i, o in BOTTOM + TOP)  # forward 2, backward 4 FLOPs per MAC
    interaction = 3 * 2 * batch * 27 * 27 * 128
    for rank, trace in job.traces.items():
        names = trace.names
        comp = trace.types == NodeType.COMP_NODE
        is_mlp = np.array(["mlp" in n for n in names]) & comp
        assert int(trace.num_ops[is_mlp].sum()) == mlp
        assert int(trace.num_ops[np.array(["interaction" in n for n in names])].sum()) == interaction
        tables = len(range(rank, 26, npus))  # table i on rank i % npus
        lookup = trace.num_ops[names == "fwd.embedding_lookup"]
        assert lookup.tolist() == [npus * batch * tables * 128]


def test_roles_follow_table_counts_and_deps_overlap() -> None:
    job = dlrm("dlrm-mlperf", npus=8, batch=256, bucket_mb=1)
    assert sorted(job.roles()) == ["tables3", "tables4"]
    trace = job.trace(0)
    names = list(trace.names)
    a2a_fwd = names.index("fwd.embedding_all_to_all")
    # The forward all-to-all runs beside the bottom MLP: the interaction is the first node to wait for it.
    waiting = [names[r] for r in range(len(trace)) if trace.ids[a2a_fwd] in trace.deps_of(r)]
    assert waiting == ["fwd.interaction"]
    grads = [r for r, n in enumerate(names) if n.startswith("grad_all_reduce")]
    assert len(grads) >= 3
    first_producer = names[int(trace.rows_of(trace.deps_of(grads[0]))[0])]
    assert first_producer.startswith("bwd.top_mlp")  # launched before the bottom MLP's backward
    real = job.to_job()
    assert validate_job(real).ok
    assert_no_deadlock(real)


def test_more_ranks_than_tables_still_valid() -> None:
    job = dlrm("dlrm-small", npus=12, batch=128)
    assert sorted(job.roles()) == ["tables0", "tables1"]
    real = job.to_job()
    report = validate_job(real)
    assert report.ok, report.findings[:5]
    assert "fwd.embedding_lookup" not in set(real.traces[11].names)


def test_cli(tmp_path, capsys) -> None:  # noqa: ANN001
    prefix = tmp_path / "d"
    assert main(["generate", "dlrm", "-o", str(prefix), "--npus", "6", "--batch", "64", "--tables", "10",
                 "--embedding-dim", "32", "--bottom-mlp", "64-32", "--top-mlp", "64-1", "-q", "-j", "1"]) == 0
    assert "ranks 6, roles (distinct templates) 2" in capsys.readouterr().out
    report = validate(prefix)
    assert report.ok and report.ranks == 6
    assert main(["generate", "dlrm", "-o", str(tmp_path / "bad"), "--bottom-mlp", "64-31", "-q"]) == 2
    assert "embedding dim" in capsys.readouterr().err


def test_bad_configurations() -> None:
    with pytest.raises(UsageError):
        dlrm("nope")
    with pytest.raises(UsageError):
        dlrm(npus=0)
    with pytest.raises(UsageError):
        dlrm(colour="blue")
