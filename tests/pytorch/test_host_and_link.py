"""Host ET reader (every schema), Kineto linking, tree repair and the linked JSON."""

from __future__ import annotations

import gzip
import json
import tarfile
from collections import Counter

import pytest

from etkit.errors import EtkitError
from etkit.executor import SerialExecutor
from etkit.format.schema import NodeType
from etkit.model.trace import load_trace
from etkit.pytorch.host import load_host_trace
from etkit.pytorch.job import convert_files, convert_job
from etkit.pytorch.link import link_files, write_linked_json
from etkit.validate import validate_trace

from ..conftest import PYTORCH_JOBS, UPSTREAM
from .raw import C10D, host_collectives, load_json

pytestmark = pytest.mark.shared_data
PARAM = UPSTREAM / "facebookresearch-param" / "et_replay" / "tests" / "inputs"
PARAM_TRACES = {
    "1.0.1": PARAM / "linear_et.json.gz",
    "1.0.3-chakra.0.0.4": PARAM / "1.0.3-chakra.0.0.4" / "resnet_1gpu_et.json.gz",
    "1.1.0-chakra.0.0.4": PARAM / "1.1.0-chakra.0.0.4" / "resnet_2gpu_et.json.gz",
}


def _chakra_1_0_2(tmp_path):
    """mlcommons/chakra's own 1.0.2 test trace (a 2-rank all_gather job), unpacked into tmp_path."""
    with tarfile.open(UPSTREAM / "mlcommons-chakra" / "tests" / "data" / "1.0.2-chakra.0.0.4.tgz") as tar:
        member = tar.getmember("1.0.2-chakra.0.0.4.json")
        path = tmp_path / "host.0.json"
        path.write_bytes(tar.extractfile(member).read())
    return path


@pytest.mark.parametrize("schema", sorted(PARAM_TRACES) + ["1.0.2-chakra.0.0.4"])
def test_param_host_traces_convert(schema, tmp_path):
    path = PARAM_TRACES[schema] if schema in PARAM_TRACES else _chakra_1_0_2(tmp_path)
    raw = load_json(path)
    assert raw["schema"] == schema
    report = convert_files(path, tmp_path / "p", rank=0)
    (rank,) = report.ranks
    trace = load_trace(rank.path)
    # every host node is written (nothing dropped as "dangling"), minus the backend/param ops folded into
    # their collective's COMM node (record_param_comms of a "wait" is no collective and stays)
    parent_name = {n["id"]: n["name"] for n in raw["nodes"]}
    folded = sum(1 for n in raw["nodes"] if n["name"].startswith("nccl:") or (
        n["name"] == "record_param_comms" and parent_name.get(n.get("ctrl_deps"), "").startswith("c10d::")))
    assert len(trace) == len(raw["nodes"]) - folded
    expected = Counter(C10D[n["name"]][0] for n in raw["nodes"] if n["name"] in C10D)
    assert rank.comm_nodes == dict(expected)
    assert not rank.durations_known and rank.warnings  # a host trace alone says so
    # one rank of a 2-rank job: the per-file rules must hold (the cross-rank ones need the other rank)
    assert [f for f in validate_trace(trace, 0) if f.severity == "error"] == []


def test_record_param_comms_gives_the_group_name(tmp_path):
    report = convert_files(PARAM_TRACES["1.1.0-chakra.0.0.4"], tmp_path / "p", rank=0)
    trace = load_trace(report.ranks[0].path)
    names = trace.pg_names()
    pgs = {names[r] for r in range(len(trace)) if int(trace.types[r]) == NodeType.COMM_COLL_NODE}
    assert pgs == {"0"}
    sizes = sorted(int(trace.comm_size[r]) for r in range(len(trace)) if int(trace.types[r]) == NodeType.COMM_COLL_NODE)
    raw = sorted(c["bytes"] for c in host_collectives(PARAM_TRACES["1.1.0-chakra.0.0.4"]))
    assert sizes == raw


def test_schema_1_1_1_chakra_1_0_0_is_read(tmp_path):
    """The schema the reference converter declares but crashes on: same layout as 1.1.1-chakra.0.0.4."""
    doc = load_json(PYTORCH_JOBS / "ddp_mlp_ws2" / "rank-0.et.json")
    doc["schema"] = "1.1.1-chakra.1.0.0"
    path = tmp_path / "rank-0.et.json"
    path.write_text(json.dumps(doc))
    host = load_host_trace(path)
    assert host.schema == "1.1.1-chakra.1.0.0" and len(host.ops) == len(doc["nodes"])
    report = convert_files(path, tmp_path / "x", kineto=PYTORCH_JOBS / "ddp_mlp_ws2" / "rank-0.kineto.json")
    assert report.ranks[0].comm_nodes == {"ALL_REDUCE": 8}


def test_gzip_and_plain_give_the_same_ops(tmp_path):
    src = PYTORCH_JOBS / "pp_sendrecv_ws2" / "rank-1.et.json"
    gz = tmp_path / "rank-1.et.json.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    assert load_host_trace(gz).ops == load_host_trace(src).ops


@pytest.mark.parametrize("mutate, field", [
    (lambda n: n.update(id="seven"), "'id'"),
    (lambda n: n["attrs"].__setitem__(0, {"name": "rf_id", "type": "uint64", "value": "x"}), "'rf_id'"),
    (lambda n: n.update(inputs=[1, 2]), "'inputs'"),
    (lambda n: n.pop("name"), "'name'"),
])
def test_malformed_trace_names_rank_node_and_field(tmp_path, mutate, field):
    doc = load_json(PYTORCH_JOBS / "ddp_mlp_ws2" / "rank-0.et.json")
    victim = doc["nodes"][5]
    node_id = victim["id"]
    mutate(victim)
    path = tmp_path / "rank-3.et.json"
    path.write_text(json.dumps(doc, indent=1))
    with pytest.raises(EtkitError) as err:
        load_host_trace(path, rank=3)
    message = str(err.value)
    assert "rank 3" in message and field in message and str(path) in message
    if field != "'id'":
        assert f"node {node_id}" in message


def test_not_a_host_trace(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"traceEvents": []}')
    with pytest.raises(EtkitError, match="not a PyTorch host execution trace"):
        load_host_trace(path)


def test_link_coverage_and_repair_on_every_shared_rank():
    for job in sorted(p for p in PYTORCH_JOBS.iterdir() if p.is_dir()):
        host_path = next(job.glob("rank-0.et.json*"))
        kineto_path = next(job.glob("rank-0.kineto.json*"))
        raw = load_json(host_path)["nodes"]
        linked = link_files(host_path, kineto_path, rank=0)
        rep = linked.report
        rf = {n["id"]: next(a["value"] for a in n["attrs"] if a["name"] == "rf_id") for n in raw}
        # pytorch-traces.md §6: every node with rf_id != 0 links, except process_group:init
        expected = sum(1 for n in raw if rf[n["id"]] != 0 and "process_group:init" not in n["name"])
        assert rep.linked_ops == expected, job.name
        assert rep.name_mismatches == 0
        # every gloo op hangs under a c10d op after repair, paired by tensor identity
        gloo = [i for i, op in enumerate(linked.host.ops) if op.name.startswith("gloo:")]
        assert rep.backend_ops_paired == len(gloo)
        for i in gloo:
            parent = linked.host.ops[int(linked.parent[i])]
            assert parent.name.startswith("c10d::"), (job.name, parent.name)
            assert set(linked.host.ops[i].reads) & (set(parent.reads) | set(parent.writes)) or \
                parent.name == "c10d::_reduce_scatter_base_"


def test_repair_frees_main_thread_ops_from_async_sends():
    """pp_sendrecv rank 0: the host trace hangs c10d::recv_ under c10d::send (isend); Kineto nesting doesn't."""
    job = PYTORCH_JOBS / "pp_sendrecv_ws2"
    linked = link_files(job / "rank-0.et.json", job / "rank-0.kineto.json", rank=0)
    ops = linked.host.ops
    by_id = {op.id: op for op in ops}
    wrong_before = sum(1 for op in ops if op.name == "c10d::recv_" and by_id[op.parent].name == "c10d::send")
    wrong_after = sum(1 for i, op in enumerate(ops) if op.name == "c10d::recv_"
                      and ops[int(linked.parent[i])].name == "c10d::send")
    assert wrong_before > 0 and wrong_after == 0
    assert linked.report.tree_repairs > 0


def test_schema_1_0_1_links_by_external_id_and_time_containment():
    """linear (1.0.1): Kineto has External ids but no record-function ids, and covers ~40 iterations of a
    stack of identical layers, the host trace one. Checked against the raw JSON: every linked op has a
    Kineto twin of its name, no event is used twice, External ids follow rf_id order, a child lies inside
    its parent's event on its thread, and the iteration found is one whose zero_grad zeroes as many
    gradients as the host's (Kineto's first iteration has no gradients yet: its zero_grad is empty)."""
    linked = link_files(PARAM_TRACES["1.0.1"], PARAM / "linear_kineto.json.gz")
    rep = linked.report
    assert rep.method == "external-id"
    assert rep.linked_ops >= 0.9 * rep.host_ops
    assert rep.kernels_linked > 0
    events = [e for e in load_json(PARAM / "linear_kineto.json.gz")["traceEvents"]
              if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    by_key = {(e["tid"], e["ts"], e["dur"]): e for e in events}
    ops = linked.host.ops
    twin = {}
    for i, op in enumerate(ops[:len(ops) - rep.runtime_ops]):  # (the CUDA runtime calls link adds come last)
        if linked.ts[i] == linked.ts[i]:
            event = by_key[(int(linked.thread[i]), linked.ts[i], linked.dur[i])]
            assert event["name"] == op.name
            twin[i] = event
    assert len({id(e) for e in twin.values()}) == len(twin)
    in_call_order = sorted(twin, key=lambda i: ops[i].rf_id)
    ext = [twin[i]["args"]["External id"] for i in in_call_order]
    assert ext == sorted(ext)
    index_of = {op.id: i for i, op in enumerate(ops)}
    nested = 0
    for i, event in twin.items():
        parent = twin.get(index_of.get(ops[i].parent, -1))
        if parent is not None:
            assert parent["tid"] == event["tid"]
            assert parent["ts"] <= event["ts"] and event["ts"] + event["dur"] <= parent["ts"] + parent["dur"]
            nested += 1
    assert nested > 0.8 * len(twin)
    (zero_grad,) = [i for i in twin if ops[i].name.startswith("Optimizer.zero_grad")]
    host_zeroed = sum(1 for op in ops if op.name == "aten::zero_" and op.parent == ops[zero_grad].id)
    z = twin[zero_grad]
    kineto_zeroed = sum(1 for e in events if e["name"] == "aten::zero_" and e["tid"] == z["tid"]
                        and z["ts"] <= e["ts"] <= z["ts"] + z["dur"])
    assert host_zeroed == kineto_zeroed > 0


def test_schema_1_0_1_without_ids_links_by_name_order(tmp_path):
    """With neither record-function nor External ids in Kineto, ops are aligned per thread by name."""
    doc = load_json(PARAM / "linear_kineto.json.gz")
    for event in doc["traceEvents"]:
        (event.get("args") or {}).pop("External id", None)
    stripped = tmp_path / "kineto.json"
    stripped.write_text(json.dumps(doc))
    linked = link_files(PARAM_TRACES["1.0.1"], stripped)
    assert linked.report.method == "name-order"
    assert linked.report.linked_ops >= 0.9 * linked.report.host_ops


def test_linked_json_round_trip(tmp_path):
    job = PYTORCH_JOBS / "tp_transformer_ws2"
    linked = link_files(job / "rank-1.et.json.gz", job / "rank-1.kineto.json.gz", rank=1)
    out = tmp_path / "linked.json"
    write_linked_json(linked, out)
    doc = json.loads(out.read_text())
    timed = [n for n in doc["nodes"] if "ts" in n]
    assert len(timed) == linked.report.linked_ops
    assert all(n["exclusive_dur"] <= n["inclusive_dur"] + 1e-6 for n in timed)
    direct = convert_job(job, tmp_path / "direct", executor=SerialExecutor()).ranks[1]
    via = convert_files(out, tmp_path / "via", rank=1).ranks[0]
    assert via.nodes == direct.nodes and via.comm_nodes == direct.comm_nodes
    a, b = load_trace(direct.path), load_trace(via.path)
    assert a.types.tolist() == b.types.tolist() and a.duration.tolist() == b.duration.tolist()


def test_gpu_kernels_follow_their_stream_and_launch(tmp_path):
    """linear (schema 1.0.1, GPU): kernels attach to the CPU op that launched them; converting the linked JSON
    gives the same ET as converting host + Kineto."""
    host, kineto = PARAM_TRACES["1.0.1"], PARAM / "linear_kineto.json.gz"
    direct = convert_files(host, tmp_path / "d", kineto=kineto).ranks[0]
    assert direct.gpu_nodes == direct.link["kernels_linked"] > 0
    trace = load_trace(direct.path)
    gpu_rows = [r for r in range(len(trace)) if trace.is_cpu_op[r] == 0]
    assert len(gpu_rows) == direct.gpu_nodes
    node_of = {int(trace.ids[r]): trace.node(r) for r in gpu_rows}
    for node in node_of.values():
        launcher = trace.node(int(trace.rows_of([node.ctrl_deps[0]])[0]))
        assert node.ctrl_deps[0] in node.data_deps  # after its launch
        assert any(a.name == "is_cpu_op" and a.bool_val for a in launcher.attr)
        assert node.start_time_micros >= launcher.start_time_micros  # a kernel runs after the op launching it
    linked = link_files(host, kineto)
    write_linked_json(linked, tmp_path / "linked.json")
    via = convert_files(tmp_path / "linked.json", tmp_path / "v").ranks[0]
    again = load_trace(via.path)
    assert again.types.tolist() == trace.types.tolist() and again.start.tolist() == trace.start.tolist()
