"""Larger inputs of real shape, made by repeating a real trace's nodes with fresh ids (every attribute kept).

    python benchmarks/real_shapes.py et SRC.et[.gz] OUT.et --nodes 1000000
    python benchmarks/real_shapes.py host SRC.json[.gz] OUT.json --nodes 1000000

``et``: copy ``k`` of the source's nodes has every id, data dep and ctrl dep shifted by ``k`` times
(largest id + 1); names, types, times, IOInfo and attributes are the source's bytes, untouched.

``host`` (a PyTorch host execution trace, as param's et_replay tests hold them): the root nodes
(``[pytorch|profiler|execution_trace|...]``, process-group init) appear once, every other node once
per copy with its id, parent (``ctrl_deps``), ``rf_id`` and tensor ids shifted, so the copies are
distinct operators of one long profiled thread. Used by ``bench_real.py``; writes where it is told
(the benchmark gives it a temporary folder).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from etkit.fileio import read_bytes_maybe_gzip
from etkit.format.schema import Node
from etkit.format.stream import TraceWriter, encode_varint, open_trace

__all__ = ["repeat_et", "repeat_host_trace"]

#: Node field tags (field number << 3 | wire type) of the fields rewritten per copy.
_ID, _CTRL, _DATA = 0x08, 0x22, 0x2A


def _packed(tag: int, values: list[int]) -> bytes:
    if not values:
        return b""
    body = b"".join(encode_varint(v) for v in values)
    return bytes((tag,)) + encode_varint(len(body)) + body


def _split(record: bytes) -> tuple[Node, bytes, bytes]:
    """The node of a record, and its serialized fields 2-3 (name, type) and 6-10 (the rest): the parts
    of the record that every copy keeps byte for byte."""
    node = Node.FromString(record)
    middle = Node(name=node.name, type=node.type).SerializeToString()
    rest = Node(start_time_micros=node.start_time_micros, duration_micros=node.duration_micros,
                inputs=node.inputs if node.HasField("inputs") else None,
                outputs=node.outputs if node.HasField("outputs") else None,
                attr=node.attr).SerializeToString()
    return node, middle, rest


def repeat_et(src: str | Path, dst: str | Path, nodes: int) -> int:
    """Write ``dst``: the nodes of ``src`` repeated with fresh ids until there are at least ``nodes``.
    Returns the node count written."""
    with open_trace(src) as reader:
        metadata = reader.metadata_record
        parts = [_split(record) for record in reader.records()]
    if not parts:
        raise ValueError(f"{src}: no nodes to repeat")
    step = max(node.id for node, _, _ in parts) + 1
    copies = -(-nodes // len(parts))
    with TraceWriter(dst, metadata) as writer:
        for k in range(copies):
            shift = k * step
            for node, middle, rest in parts:
                writer.write_record(b"".join((
                    b"\x08" + encode_varint(node.id + shift) if node.id + shift else b"", middle,
                    _packed(_CTRL, [d + shift for d in node.ctrl_deps]),
                    _packed(_DATA, [d + shift for d in node.data_deps]), rest)))
    return copies * len(parts)


_ROOTS = ("[pytorch|profiler|execution_trace|", "[pytorch|profiler|execution_graph|")


def _is_root(node: dict[str, Any]) -> bool:
    return str(node.get("name", "")).startswith(_ROOTS) or "process_group:init" in str(node.get("name", ""))


def _tensor_shifted(value: Any, shift: int) -> Any:
    """``value`` (an input/output value list) with tensor and storage ids shifted: a tensor is written
    as ``[tensor_id, storage_id, offset, numel, itemsize, device]``."""
    if isinstance(value, list):
        if len(value) == 6 and isinstance(value[0], int) and isinstance(value[1], int) and isinstance(value[5], str):
            return [value[0] + shift, value[1] + shift, *value[2:]]
        return [_tensor_shifted(v, shift) for v in value]
    return value


def _host_copies(body: list[dict[str, Any]], roots: set[int], id_step: int, rf_step: int,
                 copies: int) -> Iterator[bytes]:
    for k in range(copies):
        shift, rf_shift = k * id_step, k * rf_step
        for node in body:
            copy = dict(node, id=node["id"] + shift)
            if node.get("ctrl_deps") not in roots:
                copy["ctrl_deps"] = node["ctrl_deps"] + shift
            copy["attrs"] = [dict(a, value=a["value"] + rf_shift) if a.get("name") == "rf_id" else a
                             for a in node.get("attrs", [])]
            for side in ("inputs", "outputs"):
                if side in node:
                    copy[side] = dict(node[side], values=_tensor_shifted(node[side].get("values", []), shift))
            yield orjson.dumps(copy)


def repeat_host_trace(src: str | Path, dst: str | Path, nodes: int) -> int:
    """Write ``dst``: the PyTorch host trace ``src`` with its operators repeated until ``nodes`` nodes.
    Returns the node count written."""
    doc = orjson.loads(read_bytes_maybe_gzip(src))
    all_nodes = doc["nodes"]
    roots = [n for n in all_nodes if _is_root(n)]
    root_ids = {n["id"] for n in roots}
    body = [n for n in all_nodes if n["id"] not in root_ids]
    id_step = max(n["id"] for n in all_nodes) + 1
    rf_step = 1 + max((a["value"] for n in all_nodes for a in n.get("attrs", []) if a.get("name") == "rf_id"),
                      default=0)
    copies = max(1, -(-(nodes - len(roots)) // max(len(body), 1)))
    head = {key: value for key, value in doc.items() if key != "nodes"}
    with open(dst, "wb") as out:  # one node per line, as PyTorch writes them
        out.write(orjson.dumps(head)[:-1] + b', "nodes": [\n' + b",\n".join(orjson.dumps(n) for n in roots))
        for line in _host_copies(body, root_ids, id_step, rf_step, copies):
            out.write(b",\n" + line)
        out.write(b"\n]}\n")
    return len(roots) + copies * len(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("et", "host"))
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--nodes", type=int, default=1_000_000)
    args = parser.parse_args()
    written = (repeat_et if args.kind == "et" else repeat_host_trace)(args.src, args.dst, args.nodes)
    print(f"{args.dst}: {written:,} nodes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
