"""Modes the reference rejects, passes, NONE handling, groups and errors, checked against the raw text."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from etkit.cli.main import main
from etkit.errors import EtkitError
from etkit.format.schema import CommType, NodeType
from etkit.model import Trace, load_job
from etkit.text import TextWorkloadError, convert_text, parse_text
from etkit.validate import validate, validate_job

from ..conftest import UPSTREAM

TEXT_DIR = UPSTREAM / "mlcommons-chakra" / "eg_converter" / "input_files" / "Text"
TOKENS = {"ALLREDUCE": CommType.ALL_REDUCE, "ALLGATHER": CommType.ALL_GATHER, "ALLTOALL": CommType.ALL_TO_ALL,
          "REDUCESCATTER": CommType.REDUCE_SCATTER}


def raw_layers(path) -> tuple[list[str], list[list[str]]]:
    """Header tokens and layer columns, read straight from the file."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return lines[0].split(), [line.split() for line in lines[2:]]


def names(trace: Trace) -> list[str]:
    return [trace.name(r) for r in range(len(trace))]


def row_of_name(trace: Trace, name: str, nth: int = 0) -> int:
    return [r for r in range(len(trace)) if trace.name(r) == name][nth]


def ancestors(trace: Trace, row: int) -> set[int]:
    seen: set[int] = set()
    stack = [row]
    while stack:
        for dep in trace.deps_of(stack.pop()):
            r = int(trace.rows_of([dep])[0])
            if r not in seen:
                seen.add(r)
                stack.append(r)
    return seen


def comm_bytes(trace: Trace) -> Counter:
    rows = np.flatnonzero(trace.types == NodeType.COMM_COLL_NODE)
    out: Counter = Counter()
    for r in rows:
        out[int(trace.comm_type[r])] += int(trace.comm_size[r])
    return out


@pytest.mark.shared_data
@pytest.mark.parametrize("npus", [4, 8])
def test_transformer_collectives_and_groups(npus: int) -> None:
    path = TEXT_DIR / "Transformer_HybridParallel.txt"
    header, layers = raw_layers(path)
    mp = int(header[header.index("model_parallel_NPU_group:") + 1])
    job = convert_text(path, npus=npus, passes=2)
    assert validate_job(job).ok
    mp_groups = [tuple(range(b, b + mp)) for b in range(0, npus, mp)]
    dp_groups = [tuple(range(o, npus, mp)) for o in range(mp)]
    assert sorted(job.groups.groups.values()) == sorted(mp_groups + dp_groups)
    # Expected bytes per comm type from the raw columns: fwd everywhere, ig except layer 0, wg everywhere.
    expected: Counter = Counter()
    for i, cols in enumerate(layers):
        for col, keep in ((3, True), (6, i > 0), (9, True)):
            if keep and cols[col] != "NONE":
                expected[int(TOKENS[cols[col]])] += 2 * int(cols[col + 1])
    for rank, trace in job.traces.items():
        assert comm_bytes(trace) == expected
        assert sum(n.endswith("_FWD") for n in names(trace)) == 2 * len(layers)
        for row in np.flatnonzero(trace.types == NodeType.COMM_COLL_NODE):
            members = job.members(trace.pg_names()[row])
            assert rank in members
            layer = trace.name(row)[len("COMM_COLL_NODE_"):].rsplit("_", 1)[0]
            cols = next(c for c in layers if c[0] == layer)
            # A layer whose wg and fwd/ig comm types coincide is ambiguous by name; check the others.
            token = trace.name(row).rsplit("_", 1)[1]
            in_mp = token in (cols[3], cols[6])
            in_dp = token == cols[9]
            if in_mp != in_dp:
                assert members in (mp_groups if in_mp else dp_groups)


@pytest.mark.shared_data
def test_fwd_in_bckwd_recomputes_from_checkpoints() -> None:
    path = TEXT_DIR / "Transformer_HybridParallel_Fwd_In_Bckwd.txt"
    header, layers = raw_layers(path)
    ck = header.index("checkpoints:")
    checkpoints = [int(t) for t in header[ck + 2: ck + 2 + int(header[ck + 1])]]
    ini = header.index("checkpoint_initiates:")
    initiates = [int(t) for t in header[ini + 2: ini + 2 + int(header[ini + 1])]]
    job = convert_text(path, npus=8, passes=1)
    assert validate_job(job).ok
    trace = job.traces[0]
    recomputed = [n[len("COMP_NODE_"):-len("_FWD_RECOMPUTE")] for n in names(trace) if n.endswith("_FWD_RECOMPUTE")]
    expected = []
    for layer in sorted(initiates, reverse=True):  # the backward pass meets high layers first
        start = max(c for c in checkpoints if c <= layer)
        expected += [layers[j][0] for j in range(start, layer)]
    assert recomputed == expected
    for layer in initiates:
        start = max(c for c in checkpoints if c <= layer)
        ig = row_of_name(trace, f"COMP_NODE_{layers[layer][0]}_BWD_IG")
        above = ancestors(trace, ig)
        for j in range(start, layer):
            assert row_of_name(trace, f"COMP_NODE_{layers[j][0]}_FWD_RECOMPUTE") in above
        first = row_of_name(trace, f"COMP_NODE_{layers[start][0]}_FWD_RECOMPUTE")
        wg_above = row_of_name(trace, f"COMP_NODE_{layers[layer + 1][0]}_BWD_WG")
        assert wg_above in ancestors(trace, first)


@pytest.mark.shared_data
def test_customized_layers_follow_their_policy() -> None:
    path = TEXT_DIR / "sample_per_layer_parallel_HybridCustomized.txt"
    _, layers = raw_layers(path)
    job = convert_text(path, npus=4, passes=1, model_parallel_group=2)
    assert validate_job(job).ok
    assert sorted(job.groups.groups.values()) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    trace = job.traces[3]
    comms = [trace.name(r) for r in np.flatnonzero(trace.types == NodeType.COMM_COLL_NODE)]
    pgs = {trace.name(r): trace.pg_names()[r] for r in np.flatnonzero(trace.types == NodeType.COMM_COLL_NODE)}
    for i, cols in enumerate(layers):
        policy = cols[12]
        mine = [c for c in comms if c.startswith(f"COMM_COLL_NODE_{cols[0]}_")]
        want = []
        if policy != "DATA":
            want += [t for t, keep in ((cols[3], True), (cols[6], i > 0)) if keep and t != "NONE"]
        if policy != "MODEL" and cols[9] != "NONE":
            want.append(cols[9])
        assert sorted(c.rsplit("_", 1)[1] for c in mine) == sorted(want), cols[0]
        for c in mine:
            if policy in ("DATA", "MODEL"):
                assert pgs[c] is None  # spans every rank
            else:
                assert job.members(pgs[c]) in ((2, 3), (1, 3))
    plain = convert_text(path, npus=4, passes=1)
    assert not plain.groups.groups and (plain.traces[0].pg_idx == -1).all()


@pytest.mark.shared_data
def test_hybrid_model_data_puts_data_parallel_on_consecutive_ranks() -> None:
    job = convert_text(TEXT_DIR / "MLP_HybridParallel_Model_Data.txt", npus=8, passes=1, model_parallel_group=2)
    trace = job.traces[5]
    pg = {trace.name(r): trace.pg_names()[r] for r in np.flatnonzero(trace.types == NodeType.COMM_COLL_NODE)}
    assert job.members(pg["COMM_COLL_NODE_layer_64_2_mlp0_ALLGATHER"]) == (1, 5)
    assert job.members(pg["COMM_COLL_NODE_layer_64_2_mlp0_ALLREDUCE"]) == (4, 5, 6, 7)


@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["Resnet50_DataParallel", "MLP_ModelParallel", "MLP_HybridParallel_Data_Model",
                                  "DLRM_HybridParallel", "AllReduce_1MB"])
def test_passes_repeat_the_graph_and_chain_across_passes(name: str) -> None:
    one = convert_text(TEXT_DIR / f"{name}.txt", npus=2, passes=1).traces[0]
    three = convert_text(TEXT_DIR / f"{name}.txt", npus=2, passes=3).traces[0]
    assert len(three) == 3 * len(one)
    assert Counter(names(three)) == Counter({n: 3 * c for n, c in Counter(names(one)).items()})
    if name == "AllReduce_1MB":
        return
    # Each pass's first forward waits directly on layer 0's weight-gradient product of the previous pass:
    # its collective, or its compute when the layer has none (MODEL, or NONE).
    _, layers = raw_layers(TEXT_DIR / f"{name}.txt")
    wg_token = layers[0][9]
    want = (f"COMP_NODE_{layers[0][0]}_BWD_WG" if name == "MLP_ModelParallel" or wg_token == "NONE"
            else f"COMM_COLL_NODE_{layers[0][0]}_{wg_token}")
    first_fwd = names(one)[0]
    for nth in (1, 2):
        row = row_of_name(three, first_fwd, nth)
        deps = [int(three.rows_of([d])[0]) for d in three.deps_of(row)]
        assert [three.name(r) for r in deps] == [want]
        assert (nth - 1) * len(one) <= deps[0] < nth * len(one)


def test_none_comm_gives_no_node_and_dependencies_pass_through() -> None:
    text = ("MODEL\r\n3\r\n"
            "a -1 10 ALLGATHER 100 11 ALLREDUCE 101 12 NONE 0 1\r\n"
            "b -1 20 NONE 0 21 NONE 0 22 NONE 0 1\r\n"
            "c -1 30 ALLGATHER 300 31 ALLREDUCE 301 32 NONE 0 1\r\n\r\n\r\n")
    trace = convert_text(parse_text(text, "w.txt"), npus=2).traces[0]
    assert "NONE" not in " ".join(names(trace))
    fwd_c = row_of_name(trace, "COMP_NODE_c_FWD")
    assert [trace.name(int(trace.rows_of([d])[0])) for d in trace.deps_of(fwd_c)] == ["COMP_NODE_b_FWD"]
    ig_a = row_of_name(trace, "COMP_NODE_a_BWD_IG")
    deps = {trace.name(int(trace.rows_of([d])[0])) for d in trace.deps_of(ig_a)}
    assert deps == {"COMP_NODE_b_BWD_WG", "COMP_NODE_b_BWD_IG"}
    assert comm_bytes(trace) == Counter({int(CommType.ALL_GATHER): 400, int(CommType.ALL_REDUCE): 301})
    assert (trace.is_cpu_op == 0).all()


def test_dlrm_enhanced_is_dlrm() -> None:
    body = "".join(f"l{i} -1 {i + 1} {'ALLTOALL' if i == 0 else 'NONE'} 64 5 {'ALLTOALL' if i == 0 else 'NONE'} "
                   f"64 5 {'NONE' if i == 0 else 'ALLREDUCE'} 8 1\n" for i in range(4))
    a = convert_text(parse_text("HYBRID_DLRM 2\n4\n" + body), npus=2).traces[0]
    b = convert_text(parse_text("HYBRID_DLRM_ENHANCED\tDLRM_LAST_BOTTOM_LAYER: 2\n4\n" + body), npus=2).traces[0]
    assert names(a) == names(b)
    assert names(a).count("COMM_COLL_NODE_l0_ALLTOALL") == 2


@pytest.mark.parametrize(("text", "line", "message"), [
    ("", 1, "empty first line"),
    ("PIPELINE\n1\n", 1, "unknown parallelism 'PIPELINE'"),
    ("DATA extra\n1\n", 1, "unexpected header field"),
    ("DATA\nsix\n", 2, "number of layers must be an integer"),
    ("DATA\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 4\n", 3, "at least 12 columns"),
    ("DATA\n1\nl -1 1 NONE 0 1 NONE 0 1 BROADCAST 4 1\n", 3, "unknown weight-gradient comm type 'BROADCAST'"),
    ("DATA\n1\nl -1 x NONE 0 1 NONE 0 1 ALLREDUCE 4 1\n", 3, "forward compute time"),
    ("DATA\n2\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 4 1\n", 3, "declares 2 layers but the file has 1"),
    ("MICRO\n1\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n", 3, "no collective"),
    ("HYBRID_DLRM\n2\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 1\nm -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n", 1,
     "index of the last bottom-MLP layer"),
    ("HYBRID_DLRM 1\n2\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 1\nm -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n", 1,
     "must be between 1 and 0"),
    ("HYBRID_TRANSFORMER\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 4 1\n", 1, "model_parallel_NPU_group"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 checkpoints: 1 2 checkpoint_initiates: 1 1\n"
     "3\n" + "l -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 4 1\n" * 3, 1, "initiate layer 1 has no checkpoint"),
    ("HYBRID_CUSTOMIZED\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 4 1\n", 3, "13th column"),
    ("HYBRID_CUSTOMIZED\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 4 1 PIPE\n", 3, "unknown layer policy 'PIPE'"),
])
def test_bad_input_names_file_and_line(text: str, line: int, message: str) -> None:
    with pytest.raises(TextWorkloadError) as info:
        convert_text(parse_text(text, "bad.txt"), npus=2)
    assert str(info.value).startswith(f"bad.txt:{line}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_group_size_must_divide_npus() -> None:
    text = "HYBRID_TRANSFORMER model_parallel_NPU_group: 3\n1\nl -1 1 ALLREDUCE 8 1 NONE 0 1 ALLREDUCE 4 1\n"
    with pytest.raises(TextWorkloadError, match="w.txt:1: 4 NPUs cannot be split"):
        convert_text(parse_text(text, "w.txt"), npus=4)
    with pytest.raises(EtkitError, match="applies to HYBRID modes"):
        convert_text(parse_text("DATA\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 4 1\n", "w.txt"), npus=4,
                     model_parallel_group=2)


@pytest.mark.shared_data
def test_cli(tmp_path, capsys) -> None:
    prefix = tmp_path / "tr"
    assert main(["convert", "text", str(TEXT_DIR / "Transformer_HybridParallel.txt"), "-o", str(prefix),
                 "--npus", "8", "--passes", "2", "-q"]) == 0
    groups = json.loads((tmp_path / "tr.comm_groups.json").read_text())
    assert sorted(groups.values()) == [[0, 1], [0, 2, 4, 6], [1, 3, 5, 7], [2, 3], [4, 5], [6, 7]]
    assert validate(prefix).ok
    assert len(load_job(prefix).traces) == 8
    bad = tmp_path / "bad.txt"
    bad.write_text("DATA\n1\nconv -1 1 NONE 0 1 NONE 0 1 ALLREDUCE four 1\n")
    assert main(["convert", "text", str(bad), "-o", str(tmp_path / "x"), "--npus", "2", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: the weight-gradient comm size (column 11) must be an integer" in err
    assert not list(tmp_path.glob("x.*"))
