"""Timeline JSON and graph drawings, checked against the constructed job they came from."""

from __future__ import annotations

import gzip
import json
import xml.etree.ElementTree as ET

import pytest

from etkit.errors import UsageError
from etkit.viz.graph import select_subgraph, write_graph
from etkit.viz.timeline import write_timeline

from ..analyze.builders import RECV, SEND, N, build_job, coll, comp


@pytest.fixture
def two_rank_job(tmp_path):
    # rank 1 reaches the all-reduce 8 us late; rank 0 then sends 4 KiB to rank 1
    return build_job(tmp_path, {
        0: [comp(1, 100, 10, name="fwd"), coll(2, 110, 20, [1]), comp(3, 110, 15, [1], "bwd"),
            N(4, SEND, 130, 2, [2], "send", {"comm_dst": 1, "comm_tag": 3, "comm_size": 4096})],
        1: [comp(1, 100, 18, name="fwd"), coll(2, 118, 12, [1]),
            N(3, RECV, 125, 7, [2], "recv", {"comm_src": 0, "comm_tag": 3, "comm_size": 4096})]})


def test_timeline_events_tracks_and_flows(two_rank_job, tmp_path):
    result = write_timeline(two_rank_job, tmp_path / "t.json")
    data = json.loads(result.paths[0].read_bytes())
    events = data["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 7 == result.events
    by = {(e["pid"], e["args"]["id"]): e for e in slices}
    # microseconds from the job's first start (100 us)
    assert by[(0, 2)]["ts"] == 10.0 and by[(0, 2)]["dur"] == 20.0
    assert by[(1, 3)]["ts"] == 25.0 and by[(1, 3)]["args"]["bytes"] == 4096
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names[(0, by[(0, 1)]["tid"])] == "compute" and names[(0, by[(0, 2)]["tid"])] == "comm"
    assert {e["args"]["name"] for e in events if e.get("name") == "process_name"} == {"rank 0", "rank 1"}
    starts = [e for e in events if e["ph"] == "s"]
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    # one send->recv arrow, one all-reduce arrow from the late rank 1 to rank 0
    pairs = sorted((e["pid"], finishes[e["id"]]["pid"], e["name"]) for e in starts)
    assert pairs == [(0, 1, "send/recv"), (1, 0, "ALL_REDUCE")]
    for s in starts:  # every arrow lands inside its target slice
        f = finishes[s["id"]]
        target = [x for x in slices if x["pid"] == f["pid"] and x["tid"] == f["tid"]
                  and x["ts"] <= f["ts"] <= x["ts"] + x["dur"]]
        assert target


def test_timeline_splits_past_the_size_limit(two_rank_job, tmp_path):
    result = write_timeline(two_rank_job, tmp_path / "t.json.gz", max_bytes=300)
    assert [p.name for p in result.paths] == ["t.part0.json.gz", "t.part1.json.gz"]
    pids = [{e["pid"] for e in json.loads(gzip.decompress(p.read_bytes()))["traceEvents"]} for p in result.paths]
    assert pids == [{0}, {1}]
    assert result.flows == 0  # both arrows cross files


def test_timeline_removes_the_stale_files_of_an_earlier_run_under_the_same_name(two_rank_job, tmp_path):
    out = tmp_path / "tl" / "t.json"
    out.parent.mkdir()
    # names that are not ours to remove: another output, another extension, not a part number
    decoys = ["t.part0.json.gz", "u.part0.json", "t.part01.json", "t.partx.json", "t.part0.json.bak", "t.json.gz"]
    for name in decoys:
        (out.parent / name).write_text("keep")

    def listing() -> list[str]:
        return sorted(p.name for p in out.parent.iterdir() if p.name not in decoys)

    assert [p.name for p in write_timeline(two_rank_job, out, max_bytes=300).paths] == ["t.part0.json", "t.part1.json"]
    assert listing() == ["t.part0.json", "t.part1.json"]
    single = write_timeline(two_rank_job, out)  # the parts of the split run would be read as this job's
    assert listing() == ["t.json"]
    assert f"removed {out.parent / 't.part0.json'} (left by an earlier run under this name)" in single.notes
    write_timeline(two_rank_job, out, max_bytes=300)
    assert listing() == ["t.part0.json", "t.part1.json"]  # and the reverse
    (out.parent / "t.part2.json").write_text("{}")  # from an earlier split into more parts
    write_timeline(two_rank_job, out, max_bytes=300)
    assert listing() == ["t.part0.json", "t.part1.json"]
    assert all((out.parent / name).read_text() == "keep" for name in decoys)


def test_a_failed_timeline_leaves_the_earlier_output_in_place(two_rank_job, tmp_path, monkeypatch):
    import etkit.viz.timeline as timeline

    out = tmp_path / "t.json"
    write_timeline(two_rank_job, out, max_bytes=300)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("t.*")}

    def broken(*args, **kwargs):
        raise RuntimeError("disk gone")

    monkeypatch.setattr(timeline, "_rank_events", broken)
    with pytest.raises(RuntimeError):
        write_timeline(two_rank_job, out)
    assert {p.name: p.read_bytes() for p in tmp_path.glob("t.*")} == before


def test_graph_around_depth_and_filter(two_rank_job, tmp_path):
    trace = two_rank_job.traces[0]
    g = select_subgraph(trace, around=2, depth=1)
    assert sorted(trace.ids[g.rows].tolist()) == [1, 2, 4]  # parent fwd and child send
    g = select_subgraph(trace, filters=["type=COMP"])
    assert sorted(trace.ids[g.rows].tolist()) == [1, 3]
    g = select_subgraph(trace, filters=["kind=comm"])
    assert sorted(trace.ids[g.rows].tolist()) == [2, 4]
    assert [(int(trace.ids[p]), int(trace.ids[c]), b) for p, c, b in g.edges] == [(2, 4, False)]
    g = select_subgraph(trace, filters=["name~^(fwd|send)$"])
    # send depends on fwd only through the all-reduce: a bridged edge
    assert [(int(trace.ids[p]), int(trace.ids[c]), b) for p, c, b in g.edges] == [(1, 4, True)]
    with pytest.raises(UsageError):
        select_subgraph(trace, filters=["colour=red"])
    with pytest.raises(UsageError):
        select_subgraph(trace, max_nodes=2)


@pytest.mark.parametrize("fmt", ["dot", "graphml", "svg", "png"])
def test_graph_formats_mark_the_critical_path(two_rank_job, tmp_path, fmt):
    trace = two_rank_job.traces[0]
    critical = {0, 1}  # rows of fwd and all_reduce
    out, g, how = write_graph(trace, tmp_path / f"g.{fmt}", critical_rows=critical)
    data = out.read_bytes()
    if fmt == "dot":
        text = data.decode()
        assert text.count("->") == 3 and 'n1 -> n2 [color="#d62728", penwidth=2]' in text
    elif fmt == "graphml":
        root = ET.fromstring(data)
        ns = {"g": "http://graphml.graphdrawing.org/xmlns"}
        assert len(root.findall(".//g:node", ns)) == 4 and len(root.findall(".//g:edge", ns)) == 3
    elif fmt == "svg":
        assert b"<svg" in data[:500] and how in ("graphviz", "matplotlib")
    else:
        assert data[:8] == b"\x89PNG\r\n\x1a\n"


def _fields(buf: bytes) -> list[tuple[int, int, object]]:
    """Protobuf wire decoding, independent of the writer: (field, wire type, value) in order."""
    out, i = [], 0

    def varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            b = buf[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while i < len(buf):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            out.append((field, wire, varint()))
        elif wire == 1:
            out.append((field, wire, int.from_bytes(buf[i:i + 8], "little")))
            i += 8
        elif wire == 2:
            n = varint()
            out.append((field, wire, buf[i:i + n]))
            i += n
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return out


def test_perfetto_protobuf_timeline(two_rank_job, tmp_path):
    # field numbers from Perfetto's protos: Trace.packet=1; TracePacket timestamp=8, track_event=11,
    # track_descriptor=60; TrackEvent type=9 (1 begin, 2 end), track_uuid=11, name=23, flow_ids=47,
    # terminating_flow_ids=48; TrackDescriptor uuid=1, name=2, process=3, thread=4, parent_uuid=5
    result = write_timeline(two_rank_job, tmp_path / "t.pftrace")
    packets = [dict((f, v) for f, _, v in _fields(p)) | {"_raw": p} for f, _, p in _fields(result.paths[0].read_bytes())
               if f == 1]
    descriptors = [dict((f, v) for f, _, v in _fields(p[60])) for p in packets if 60 in p]
    processes = [d for d in descriptors if 3 in d]
    threads = {d[1]: d for d in descriptors if 4 in d}
    assert len(processes) == 2 and all(threads[u][5] in {p[1] for p in processes} for u in threads)
    events = []
    for p in packets:
        if 11 in p:
            fields = _fields(p[11])
            ev = {f: v for f, _, v in fields}
            ev["flows"] = [v for f, _, v in fields if f == 47]
            ev["ends"] = [v for f, _, v in fields if f == 48]
            events.append((p[8], ev))
    begins = [(ts, ev) for ts, ev in events if ev[9] == 1]
    assert len(begins) == len(events) - len(begins) == 7 == result.events
    by_name = {(threads[ev[11]][5], ev[23]): ts for ts, ev in begins}
    rank0 = next(p[1] for p in processes if b"rank 0" in p[3])
    assert by_name[(rank0, b"all_reduce")] == 10_000  # ns from the first start
    flow_out = sorted(f for _, ev in begins for f in ev["flows"])
    flow_in = sorted(f for _, ev in begins for f in ev["ends"])
    assert flow_out == flow_in == [1, 2] and result.flows == 2
    for uuid in threads:  # every begin on a track is closed, in order
        depth = 0
        for _ts, ev in events:
            if ev[11] == uuid:
                depth += 1 if ev[9] == 1 else -1
                assert depth >= 0
        assert depth == 0
