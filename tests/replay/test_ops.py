"""Rebuilding recorded ATen ops, the tensor pool and calibrated kernels, in-process on real trace data."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from etkit.replay.aten import UnsupportedOp, parse_op_call, run_op_call, tensor_dtype
from etkit.replay.kernels import KernelBank
from etkit.replay.pool import TensorPool

from ..conftest import PYTORCH_JOBS


def _host_nodes(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["nodes"]


def _call_of(raw):
    schema = next(a["value"] for a in raw["attrs"] if a["name"] == "op_schema")
    i = raw["inputs"]
    # the converter stores IOInfo as the Python str() of the host ET lists: do the same here
    return parse_op_call(raw["name"], schema, str(i["values"]), str(i["shapes"]), str(i["types"]))


@pytest.mark.shared_data
@pytest.mark.parametrize("job", ["ddp_mlp_ws2", "tp_transformer_ws2", "all_to_all_ws2", "fsdp2_mlp_ws2", "cnn_single"])
def test_every_aten_op_of_a_real_trace_rebuilds_and_runs(job):
    path = next((PYTORCH_JOBS / job).glob("rank-0.et.json*"))
    nodes = [n for n in _host_nodes(path) if n["name"].startswith("aten::")]
    pool = TensorPool("cpu")
    with torch.no_grad():
        for raw in nodes:  # as_strided views of tp_transformer included: they get a wide enough storage
            run_op_call(_call_of(raw), pool)
    meta = json.loads((PYTORCH_JOBS / job / "meta.json").read_text())
    assert len(nodes) == meta["stats"]["rank-0"]["et"]["aten_nodes"]
    assert pool.stats.reuses > pool.stats.allocations  # memory is reused, not reallocated per op


@pytest.mark.shared_data
def test_recorded_shapes_give_the_recorded_output_shape():
    nodes = _host_nodes(PYTORCH_JOBS / "ddp_mlp_ws2" / "rank-0.et.json")
    addmm = [n for n in nodes if n["name"] == "aten::addmm"]
    pool = TensorPool("cpu")
    for raw in addmm:
        with torch.no_grad():
            out = run_op_call(_call_of(raw), pool)
        assert list(out.shape) == raw["outputs"]["shapes"][0]
        assert out.dtype == tensor_dtype(raw["outputs"]["types"][0])


def test_trace_strings_are_parsed_never_evaluated():
    with pytest.raises(UnsupportedOp, match="unparseable"):
        parse_op_call("aten::relu", "aten::relu(Tensor self) -> Tensor", "[__import__('os').getcwd()]", "[[]]",
                      "['Tensor(float)']")


def test_infinite_scalars_as_python_prints_them_are_replayed():
    """An attention mask fill records ``-inf``: Python's ``str()`` writes it bare, which is no literal to
    ``ast.literal_eval``; the trace literal parser reads it, so the op is replayed instead of emulated."""
    values = str([[11, 12, 0, 8, 4, "cpu"], [13, 14, 0, 8, 1, "cpu"], float("-inf")])
    call = parse_op_call("aten::masked_fill", "aten::masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor",
                         values, str([[2, 4], [2, 4], []]), str(["Tensor(float)", "Tensor(bool)", "Double"]))
    assert call.args[2].value == float("-inf")
    with torch.no_grad():
        out = run_op_call(call, TensorPool("cpu"))
    assert list(out.shape) == [2, 4] and out.dtype == torch.float32


def test_a_nesting_bomb_is_refused_as_unparseable_not_a_crash():
    bomb = "[" * 200_000 + "]" * 200_000
    with pytest.raises(UnsupportedOp, match="unparseable IOInfo values"):
        parse_op_call("aten::relu", "aten::relu(Tensor self) -> Tensor", bomb, "[[]]", "['Tensor(float)']")


def test_unsupported_arguments_and_ops_give_reasons():
    with pytest.raises(UnsupportedOp, match="argument of type Object"):
        parse_op_call("aten::relu", "aten::relu(Tensor self) -> Tensor", "['<Object>']", "[[]]", "['Object']")
    with pytest.raises(UnsupportedOp, match="no ATen operator"):
        parse_op_call("aten::definitely_not_an_op", "", "[]", "[]", "[]")
    with pytest.raises(UnsupportedOp, match="not an ATen operator"):
        parse_op_call("c10d::allreduce_", "", "[]", "[]", "[]")


def test_pool_lends_each_tensor_once_and_reuses_it():
    pool = TensorPool("cpu", max_bytes=1 << 20)
    a = pool.take((4, 4), torch.float32)
    b = pool.take((4, 4), torch.float32)
    assert a.data_ptr() != b.data_ptr()
    assert torch.equal(a, torch.ones(4, 4))  # float stand-ins hold ones, integer ones zeros
    assert torch.equal(pool.take((3,), torch.int64), torch.zeros(3, dtype=torch.int64))
    pool.give_back(a)
    assert pool.take((4, 4), torch.float32) is a
    big = pool.take((1 << 20,), torch.uint8)  # 1 MiB: fills the cap alone
    pool.give_back(b)
    pool.give_back(big)
    assert pool.idle_bytes <= 1 << 20  # the least recently returned tensor was dropped
    resized = pool.take((8,), torch.float32)
    resized.resize_(16)
    pool.give_back(resized, (8,))  # an op changed its shape: not kept
    assert pool.take((8,), torch.float32) is not resized


def test_kernel_choice_follows_the_recorded_work():
    bank = KernelBank(TensorPool("cpu"), calibrate=False)
    bank.matmul_s = {16: 2e-6, 64: 20e-6, 256: 1e-3}
    by_ops = bank.choose(2 * 64**3, 0, 5)  # a 64x64x64 matmul is 2*64^3 FLOPs
    assert (by_ops.kind, by_ops.size, by_ops.reps, by_ops.basis) == ("matmul", 64, 1, "num_ops")
    huge = bank.choose(2 * 4096**3, 0, 5)  # capped at 2048: eight 2048-matmuls do the same FLOPs
    assert (huge.size, huge.reps) == (2048, 8)
    by_bytes = bank.choose(0, 3000, 5)
    assert (by_bytes.kind, by_bytes.size, by_bytes.reps) == ("copy", 3000, 1)
    by_time = bank.choose(0, 0, 100)  # 100 us: 64-matmuls of 20 us, five times
    assert (by_time.size, by_time.reps, by_time.basis) == (64, 5, "duration")
    assert bank.choose(0, 0, 0) is None
    bank.run(by_ops)
    bank.run(by_bytes)


def test_calibration_measures_every_size_even_without_time_budget():
    bank = KernelBank(TensorPool("cpu"), calibrate=False)
    bank.calibrate(budget_s=0.0)  # a loaded host can spend the whole budget on the warm-up run
    assert sorted(bank.matmul_s) == [16, 32, 64, 128, 256, 512]
    assert all(seconds > 0 for seconds in bank.matmul_s.values())
