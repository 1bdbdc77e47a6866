"""The depth-first walk of a rank's op tree in C (``_hostops.walk``) gives exactly what its Python twin
``convert.depth_first`` gives: on every real trace (the shared PyTorch jobs with their Kineto traces, param's
host traces, HTA's Kineto traces) and on trees the real ones do not have (ties, orphans, cycles, bad input)."""

from __future__ import annotations

import math

import pytest

from etkit.pytorch import convert
from etkit.pytorch.convert import classify_ops, comm_levels, depth_first
from etkit.pytorch.host import HostOp, load_host_trace
from etkit.pytorch.kineto import load_kineto
from etkit.pytorch.kineto_convert import link_kineto
from etkit.pytorch.link import LinkedRank, link, link_files

from ..conftest import KINETO_TRACES, PYTORCH_JOBS, UPSTREAM

PARAM = UPSTREAM / "facebookresearch-param" / "et_replay" / "tests" / "inputs"
KERNEL = convert._HOSTOPS
needs_kernel = pytest.mark.skipif(KERNEL is None, reason="etkit.pytorch._hostops is not built")


def _args(linked: LinkedRank) -> tuple:
    ops = linked.host.ops
    return ops, linked.parent.tolist(), linked.ts.tolist(), comm_levels(classify_ops(ops)[0]), linked.thread.tolist()


def _alike(args: tuple) -> None:
    walked = KERNEL.walk(*args)
    assert walked is not None
    assert repr(walked) == repr(depth_first(*args))  # (repr: NaN-free floats and lanes compared as written)


def _linked_ranks() -> list:
    ranks = []
    if PYTORCH_JOBS.is_dir():
        for host in sorted(PYTORCH_JOBS.rglob("rank-*.et.json*")):
            kineto = next(iter(host.parent.glob(host.name.split(".")[0] + ".kineto.json*")), None)
            ranks.append(pytest.param(host, kineto, id=f"{host.parent.name}/{host.name}"))
    for trace in ("1.0.3-chakra.0.0.4/resnet_1gpu_et.json.gz", "1.1.0-chakra.0.0.4/resnet_2gpu_et.json.gz"):
        ranks.append(pytest.param(PARAM / trace, None, id=trace))
    return ranks


@needs_kernel
@pytest.mark.shared_data
@pytest.mark.parametrize(("host", "kineto"), _linked_ranks())
def test_real_ranks_walk_alike(host, kineto):
    _alike(_args(link_files(host, kineto)))


@needs_kernel
@pytest.mark.shared_data
@pytest.mark.parametrize("name", sorted(KINETO_TRACES))
def test_kineto_traces_walk_alike(name):
    path = KINETO_TRACES[name]
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
    for file in files:
        _alike(_args(link_kineto(load_kineto(file, rank=0))))


def _op(node_id: int, tid: int = 1) -> HostOp:
    return HostOp(node_id, "op", node_id, 0, 0, -1, 0, tid, 0, "", ("[]",) * 6, (), ())  # type: ignore[arg-type]


@needs_kernel
def test_made_up_trees_walk_alike():
    nan = math.nan
    ops = [_op(i, tid=i % 3) for i in (5, 3, 9, 3, 7, 1, 2, 8, 4, 6)]
    parent = [-1, 0, 0, -1, 1, 1, 3, 8, 7, -5]  # roots 0, 3, 9 (ids 5, 3, 6; two ids 3); ops 7 and 8 a cycle
    ts = [nan, 2.0, 2.0, nan, -0.0, 0.0, 1.5, nan, 4.0, nan]
    thread = [-1, 4, -1, -1, 4, 7, -1, -1, 2, -1]
    for levels in ({}, {1: 1, 4: 3, 5: 1, 2: 0}, {0: 2, 1: 2, 4: 1}):
        _alike((ops, parent, ts, levels, thread))
    _alike(([], [], [], {}, []))


@needs_kernel
def test_input_the_kernel_does_not_take_is_left_to_python():
    ops = [_op(1), _op(2)]
    assert KERNEL.walk(ops, [-1, 2], [math.nan] * 2, {}, [-1, -1]) is None  # (a parent outside the ops)
    big = [_op(1), _op(1 << 64)]
    assert KERNEL.walk(big, [-1, 0], [math.nan] * 2, {}, [-1, -1]) is None  # (an id beyond 64 bits)
    with pytest.raises(IndexError):
        depth_first(ops, [-1, 2], [math.nan] * 2, {}, [-1, -1])


@needs_kernel
def test_param_trace_converts_alike_with_and_without_the_c_walk(monkeypatch):
    path = PARAM / "1.0.3-chakra.0.0.4/resnet_1gpu_et.json.gz"
    _, with_c = convert.convert_linked_bytes(link(load_host_trace(path), None), rank=0)

    class NoWalk:
        def __getattr__(self, name):  # noqa: ANN001, ANN204
            return (lambda *args: None) if name == "walk" else getattr(KERNEL, name)

    monkeypatch.setattr(convert, "_HOSTOPS", NoWalk())
    assert convert.convert_linked_bytes(link(load_host_trace(path), None), rank=0)[1] == with_c
