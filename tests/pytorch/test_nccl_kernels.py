"""GPU (NCCL) traces: collectives and p2p seen as CUDA kernels fold into one COMM node per call.

The shared traces are CPU/gloo only, so this builds a minimal host ET + Kineto pair by hand, laid out as
PyTorch writes them for NCCL (pytorch-traces.md §3-4, pytorch-conversion.md §4.1): c10d::allreduce_ ->
record_param_comms (with its group attributes) -> nccl:all_reduce, and a ncclDevKernel launched by
cudaLaunchKernel under record_param_comms.
"""

from __future__ import annotations

import json

from etkit.format.schema import CommType, NodeType
from etkit.model.trace import load_trace
from etkit.pytorch.job import convert_files


def _node(node_id, name, parent, rf_id, inputs=None, types=None, extra=()):
    attrs = [{"name": n, "type": "uint64", "value": v}
             for n, v in (("rf_id", rf_id), ("fw_parent", 0), ("seq_id", -1), ("scope", 0), ("tid", 1), ("fw_tid", 0))]
    attrs.append({"name": "op_schema", "type": "string", "value": ""})
    attrs += [{"name": n, "type": "string", "value": v} for n, v in extra]
    return {"id": node_id, "name": name, "ctrl_deps": parent,
            "inputs": {"values": inputs or [], "shapes": [], "types": types or []},
            "outputs": {"values": [], "shapes": [], "types": []}, "attrs": attrs}


TENSOR = [10, 11, 0, 1024, 2, "cuda:0"]  # 1024 bf16 elements = 2048 bytes


def _param_comms(node_id, parent, rf_id, collective, pg_name, pg_desc):
    """record_param_comms as PyTorch writes it for NCCL (with its group attributes)."""
    return _node(node_id, "record_param_comms", parent, rf_id,
                 [[TENSOR], 7, [pg_name, pg_desc], 0, collective, [], [], 0, 1, 2],
                 ["GenericList[Tensor(c10::BFloat16)]", "Int", "Tuple[String,String]", "Int", "String",
                  "GenericList[]", "GenericList[]", "Int", "Int", "Int"],
                 extra=(("collective_name", collective), ("dtype", "BFloat16"), ("pg_name", pg_name)))


def _write_pair(tmp_path):
    nodes = [
        _node(2, "[pytorch|profiler|execution_trace|thread]", 1, 0),
        _node(3, "ProfilerStep#1", 2, 1),
        _node(4, "aten::mul", 3, 2, [TENSOR], ["Tensor(c10::BFloat16)"]),
        _node(5, "c10d::allreduce_", 3, 3, [[TENSOR], "<Object>", "<Object>", "<None>", -1],
              ["GenericList[Tensor(c10::BFloat16)]", "Object", "Object", "None", "Int"]),
        _param_comms(6, 5, 4, "allreduce", "3", "tp0"),
        _node(7, "nccl:all_reduce", 6, 5, [TENSOR], ["Tensor(c10::BFloat16)"]),
        _node(8, "aten::add", 3, 6, [TENSOR], ["Tensor(c10::BFloat16)"]),
        _node(1, "[pytorch|profiler|execution_trace|process]", 1, 0),
    ]
    nodes[6]["attrs"].append({"name": "in_msg_nelems", "type": "uint64", "value": 1024})
    cpu = _cpu
    events = [cpu("ProfilerStep#1", 1, 0.0, 100.0), cpu("aten::mul", 2, 1.0, 5.0),
              cpu("c10d::allreduce_", 3, 10.0, 20.0), cpu("record_param_comms", 4, 11.0, 15.0),
              cpu("nccl:all_reduce", 5, 12.0, 10.0), cpu("aten::add", 6, 40.0, 5.0),
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 100, "ts": 13.0,
               "dur": 2.0, "args": {"correlation": 77, "External id": 1004}},
              {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0, "tid": 7,
               "ts": 50.0, "dur": 30.0, "args": {"stream": 7, "correlation": 77, "External id": 1004}}]
    return _save(tmp_path, 0, 2, {"0": [0, 1], "3": [0, 1]}, nodes, events)


def _cpu(name, rf, ts, dur, tid=100):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 9, "tid": tid, "ts": ts, "dur": dur,
            "args": {"Record function id": rf, "External id": rf + 1000}}


def _save(tmp_path, rank, world, groups, nodes, events):
    """Write rank ``rank``'s host ET (pid 9) and Kineto trace (NCCL, the given groups) into tmp_path."""
    host = {"schema": "1.1.0-chakra.0.0.4", "pid": 9, "time": "2026-01-01 00:00:00", "start_ts": 1, "nodes": nodes,
            "finish_ts": 2}
    pg_config = [{"pg_name": name, "pg_desc": "default_pg" if name == "0" else f"pg{name}", "ranks": ranks,
                  "pg_size": len(ranks)} for name, ranks in groups.items()]
    kineto = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world,
                                                      "pg_config": pg_config},
              "baseTimeNanoseconds": 1_000_000_000, "traceEvents": events}
    (tmp_path / f"rank-{rank}.et.json").write_text(json.dumps(host, indent=2))
    (tmp_path / f"rank-{rank}.kineto.json").write_text(json.dumps(kineto))
    return tmp_path / f"rank-{rank}.et.json", tmp_path / f"rank-{rank}.kineto.json"


def test_nccl_collective_is_one_comm_node_timed_by_its_kernel(tmp_path):
    host, kineto = _write_pair(tmp_path)
    report = convert_files(host, tmp_path / "out", kineto=kineto).ranks[0]
    trace = load_trace(report.path)
    coll = [r for r in range(len(trace)) if int(trace.types[r]) == NodeType.COMM_COLL_NODE]
    assert len(coll) == 1 and report.comm_nodes == {"ALL_REDUCE": 1}
    (row,) = coll
    node = trace.node(row)
    assert node.name == "c10d::allreduce_"
    assert int(trace.comm_type[row]) == CommType.ALL_REDUCE
    assert int(trace.comm_size[row]) == 1024 * 2
    assert trace.pg_names()[row] == "3"  # from record_param_comms
    # the kernel's interval, on the Unix clock (base 1 s = 1e6 µs)
    assert node.start_time_micros == 1_000_050 and node.duration_micros == 30
    names = [trace.node(r).name for r in range(len(trace))]
    assert "nccl:all_reduce" not in names and "record_param_comms" not in names
    assert not any(n.startswith("ncclDevKernel") for n in names)
    # aten::add touches the reduced tensor afterwards: it waits for the collective
    add = trace.node(names.index("aten::add"))
    assert node.id in add.data_deps
    # the collective is not on the CPU thread's chain: aten::add follows the kernel's launch there, the launch
    # (a host op of its own, for launch statistics) follows aten::mul, and the collective its launch
    mul, launch = trace.node(names.index("aten::mul")), trace.node(names.index("cudaLaunchKernel"))
    assert launch.id in add.data_deps and mul.id in launch.data_deps and launch.id in node.data_deps
    assert report.link["kernels_linked"] == 1


def _write_p2p_pair(tmp_path, kernel_name, launcher_name="c10d::send"):
    """Rank 1 of 4 sends 2048 bytes to group rank 0 of group "5" = global rank 3 (pytorch-traces.md §4: the
    dispatcher op takes the group-local peer). NCCL runs it as a ncclDevKernel_SendRecv launched under
    record_param_comms; a second, unknown NCCL kernel is launched by a compute op (no host collective)."""
    nodes = [
        _node(2, "[pytorch|profiler|execution_trace|thread]", 1, 0),
        _node(3, "ProfilerStep#1", 2, 1),
        _node(5, launcher_name, 3, 3, [[TENSOR], "<Object>", 0, 11],
              ["GenericList[Tensor(c10::BFloat16)]", "Object", "Int", "Int"]),
        _param_comms(6, 5, 4, "send", "5", "pp"),
        _node(7, "nccl:send", 6, 5, [TENSOR], ["Tensor(c10::BFloat16)"]),
        _node(8, "aten::custom_fused", 3, 6, [TENSOR], ["Tensor(c10::BFloat16)"]),
        _node(1, "[pytorch|profiler|execution_trace|process]", 1, 0),
    ]
    cpu = _cpu

    def launch(ts, correlation):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 100, "ts": ts,
                "dur": 1.0, "args": {"correlation": correlation}}

    def kernel(name, ts, dur, correlation):
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                "args": {"stream": 7, "correlation": correlation}}

    events = [cpu("ProfilerStep#1", 1, 0.0, 100.0), cpu(launcher_name, 3, 10.0, 20.0),
              cpu("record_param_comms", 4, 11.0, 15.0), cpu("nccl:send", 5, 12.0, 10.0),
              cpu("aten::custom_fused", 6, 40.0, 5.0), launch(13.0, 77), kernel(kernel_name, 50.0, 30.0, 77),
              launch(41.0, 78), kernel("ncclDevKernel_Frobnicate_f32", 90.0, 4.0, 78)]
    return _save(tmp_path, 1, 4, {"0": [0, 1, 2, 3], "5": [3, 1]}, nodes, events)


def test_sendrecv_kernel_is_the_send_it_runs_and_unknown_kernels_are_listed(tmp_path):
    """Reference defect #5: ncclDevKernel_SendRecv is a ValueError there (and, alone, an ALL_TO_ALL); unknown
    NCCL kernels become ALL_REDUCE. Here the SendRecv kernel folds into its send, timed by the kernel, and
    the unknown kernel is written as a compute kernel and named in a warning."""
    host, kineto = _write_p2p_pair(tmp_path, "ncclDevKernel_SendRecv")
    report = convert_files(host, tmp_path / "out", kineto=kineto).ranks[0]
    trace = load_trace(report.path)
    assert report.comm_nodes == {"SEND": 1}
    (row,) = [r for r in range(len(trace)) if int(trace.types[r]) == NodeType.COMM_SEND_NODE]
    node = trace.node(row)
    attrs = {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}
    assert node.name == "c10d::send" and attrs["pg_name"] == "5"
    assert (attrs["comm_src"], attrs["comm_dst"], attrs["comm_tag"]) == (1, 3, 11)  # group rank 0 of [3, 1]
    assert attrs["comm_size"] == 1024 * 2
    assert node.start_time_micros == 1_000_050 and node.duration_micros == 30
    names = [trace.node(r).name for r in range(len(trace))]
    assert "ncclDevKernel_SendRecv" not in names
    (odd,) = [r for r in range(len(trace)) if trace.node(r).name == "ncclDevKernel_Frobnicate_f32"]
    assert int(trace.types[odd]) == NodeType.COMP_NODE
    assert report.unknown_comm_kernels == {"ncclDevKernel_Frobnicate_f32": 1}
    assert any("ncclDevKernel_Frobnicate_f32 x1" in w for w in report.warnings)
    assert not any(int(trace.types[r]) == NodeType.COMM_COLL_NODE for r in range(len(trace)))
