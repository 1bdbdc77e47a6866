"""The vectorised Node encoder writes what protobuf writes, byte for byte (random nodes, every field kind)."""

from __future__ import annotations

import numpy as np

from etkit.format.attrs import make_attr
from etkit.format.columnar import MISSING
from etkit.format.encode import AttrColumn, NodeTable, encode_nodes
from etkit.format.schema import IOInfo, Node


def _csr(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in lists], out=ptr[1:])
    return ptr, np.asarray([v for x in lists for v in x], dtype=np.uint64)


def test_encoded_records_are_protobufs_bytes() -> None:
    rng = np.random.default_rng(7)
    n = 3000
    big = [0, 1, 127, 128, 16383, 16384, 2**31 - 1, 2**35, 2**63 - 1]
    ids = rng.choice(big + list(range(50)), n).astype(np.uint64)
    types = rng.integers(0, 8, n)
    names = [b"", b"gemm", b"x" * 200, "\u00e9l\u00e9ment".encode()]
    name_idx = rng.integers(-1, len(names), n)
    deps = [list(rng.choice(big, rng.integers(0, 4))) for _ in range(n)]
    ctrl = [list(rng.integers(0, 1 << 20, rng.integers(0, 2))) for _ in range(n)]
    start = rng.choice(big, n).astype(np.uint64)
    duration = rng.choice(big, n).astype(np.uint64)
    io_msgs = [IOInfo(values="[[1, 2, 0, 64, 4, 'cpu']]", shapes="[[8, 8]]"), IOInfo(), IOInfo(shapes="[" * 300)]
    io = [m.SerializeToString() for m in io_msgs]
    inputs, outputs = rng.integers(-1, len(io), n), rng.integers(-1, len(io), n)
    ints = {name: np.where(rng.random(n) < 0.5, rng.choice([0, 1, -1, 300, -(2**40), 2**40, 2**62], n), MISSING)
            for name in ("comm_size", "tid")}
    src = np.where(rng.random(n) < 0.3, rng.choice([0, 5, -3, 70000], n), MISSING)
    cpu = np.where(rng.random(n) < 0.7, rng.integers(0, 2, n), MISSING)
    size = np.where(rng.random(n) < 0.5, rng.choice([0, 3, 2**40], n), MISSING)
    pg_table = [make_attr("pg_name", s).SerializeToString() for s in ("0", "17", "")]
    pg = rng.integers(-1, 3, n)
    cp, cd = _csr(ctrl)
    dp, dd = _csr(deps)
    table = NodeTable(ids, types, names, name_idx, cp, cd, dp, dd, start, duration, io, inputs, outputs,
                      [AttrColumn("is_cpu_op", "bool_val", cpu), AttrColumn("comm_size", "int64_val", ints["comm_size"]),
                       AttrColumn("comm_src", "int32_val", src), AttrColumn("tensor_size", "uint64_val", size),
                       AttrColumn("tid", "int64_val", ints["tid"]), AttrColumn(table=pg_table, index=pg)])
    blob, offsets, lengths = encode_nodes(table)
    for row in range(n):
        node = Node(id=int(ids[row]), type=int(types[row]), start_time_micros=int(start[row]),
                    duration_micros=int(duration[row]))
        if name_idx[row] >= 0:
            node.name = names[name_idx[row]].decode()
        node.ctrl_deps.extend(int(v) for v in ctrl[row])
        node.data_deps.extend(int(v) for v in deps[row])
        if inputs[row] >= 0:
            node.inputs.CopyFrom(io_msgs[inputs[row]])
        if outputs[row] >= 0:
            node.outputs.CopyFrom(io_msgs[outputs[row]])
        for name, kind, col in (("is_cpu_op", "bool_val", cpu), ("comm_size", "int64_val", ints["comm_size"]),
                                ("comm_src", "int32_val", src), ("tensor_size", "uint64_val", size),
                                ("tid", "int64_val", ints["tid"])):
            if col[row] != MISSING:
                node.attr.append(make_attr(name, bool(col[row]) if kind == "bool_val" else int(col[row]), kind))
        if pg[row] >= 0:
            node.attr.append(make_attr("pg_name", ("0", "17", "")[pg[row]]))
        expected = node.SerializeToString()
        got = blob[offsets[row]:offsets[row] + lengths[row]]
        assert got == expected, (row, node)


def test_nothing_to_encode() -> None:
    empty = np.zeros(0, dtype=np.int64)
    table = NodeTable(empty, empty, [], empty, np.zeros(1, dtype=np.int64), empty, np.zeros(1, dtype=np.int64), empty,
                      empty, empty)
    assert encode_nodes(table)[0] == b""


def test_record_parts_find_what_protobuf_parses(tmp_path) -> None:
    from etkit.format.parts import joined_spans, record_parts, span_table
    from etkit.format.stream import write_trace
    from etkit.model.trace import load_trace

    nodes = []
    for i in range(1, 400):
        node = Node(id=i, name=f"op{i % 7}")
        if i % 3:
            node.inputs.values = f"[[{i}, 2, 0, 64, 4, 'cpu'], 'text{i % 5}']"
            node.inputs.shapes = "[[8, 8], []]" if i % 2 else ""
        if i % 4 == 0:
            node.outputs.types = "['Tensor(float)']"
        node.attr.extend([make_attr("op_schema", f"schema{i % 11}"), make_attr("rf_id", i),
                          make_attr("tags", ["a", f"b{i % 3}"], "string_list")])
        if i % 5 == 0:
            node.attr.append(make_attr("involved_dim", [True, False], "bool_list"))
        nodes.append(node)
    write_trace(tmp_path / "t.0.et", None, nodes)
    trace = load_trace(tmp_path / "t.0.et")
    parts = record_parts(trace.blob, trace.rec_off, trace.rec_len, names=["involved_dim", "rf_id"])
    assert parts is not None
    for side, field in enumerate(("inputs", "outputs")):
        have = [row for row, n in enumerate(nodes) if n.HasField(field)]
        assert np.flatnonzero(parts.io_off[:, side] >= 0).tolist() == have
        off, size = parts.text_off[have], parts.text_len[have]
        values = joined_spans(trace.blob, off[:, 3 * side], size[:, 3 * side], b"\x1f").split(b"\x1f")
        assert [v.decode() for v in values] == [getattr(nodes[r], field).values for r in have]
        idx, table = span_table(trace.blob, off[:, 3 * side + 1], size[:, 3 * side + 1])
        assert [table[i] for i in idx] == [getattr(nodes[r], field).shapes for r in have]
    assert set(parts.strings) == {f"schema{k}" for k in range(11)} | {"a", "b0", "b1", "b2"}
    named = parts.attr_name >= 0
    assert sorted((int(r), parts.names[int(k)]) for r, k in zip(parts.attr_row[named], parts.attr_name[named])) == \
        sorted([(r, "rf_id") for r in range(len(nodes))] + [(r, "involved_dim") for r in range(4, len(nodes), 5)])
    for r, o, k in zip(parts.attr_row.tolist(), parts.attr_off.tolist(), parts.attr_len.tolist()):
        assert any(trace.blob[o:o + k] == a.SerializeToString() for a in nodes[r].attr)
