"""etkit anonymize: the policy, op classes, the leak search, and the proof on constructed and real jobs."""

from __future__ import annotations

import argparse
import re

import numpy as np
import pytest

from etkit.anonymize import DEFAULT_POLICY_TEXT, anonymize, compare_views, default_policy, job_view, load_policy
from etkit.anonymize.leaks import find_in_bytes, is_text
from etkit.anonymize.opclass import op_class
from etkit.errors import EtkitError, UsageError
from etkit.executor import SerialExecutor
from etkit.format.attrs import make_attr
from etkit.format.schema import CommType, GlobalMetadata, Node, NodeType
from etkit.format.stream import write_trace
from etkit.model.job import load_job
from etkit.model.trace import load_trace
from etkit.validate import validate

from ..builders import coll, node
from .test_ioinfo import sides_agree

SECRETS = ("AcmeFraudNet", "acme_secret_layer", "/home/alice/acme/model.py", "AcmeCorp-prod-cluster",
           "ncclKernel<AcmeTemplateArg>", "acme_tp_group", "secret-lr-0.000123")


def _secret_job(tmp_path, ranks: int = 2):
    """A 2-rank job whose every kind of text says who made it: names, op_schema, string arguments in IOInfo,
    GlobalMetadata, a process-group name and description, and a file path."""
    prefix = tmp_path / "AcmeFraudNet-run7" / "job"
    prefix.parent.mkdir()
    for rank in range(ranks):
        meta = GlobalMetadata(version="1.0.0")
        meta.attr.append(make_attr("host", "AcmeCorp-prod-cluster"))
        mm = node(1, name="AcmeFraudNet.acme_secret_layer::aten::mm", duration=40, start=1_000_000 + rank)
        mm.attr.append(make_attr("op_schema", "aten::mm(Tensor self, Tensor mat2) -> Tensor"))
        mm.attr.append(make_attr("rf_id", 17))
        mm.inputs.values = "[[5, 3, 0, 64, 4, 'cpu'], [6, 4, 0, 128, 4, 'cpu'], 'secret-lr-0.000123']"
        mm.inputs.shapes = "[[6, 8], [8, 12], []]"
        mm.inputs.types = "['Tensor(float)', 'Tensor(float)', 'String']"
        mm.outputs.values = "[[7, 5, 0, 128, 4, 'cpu']]"
        mm.outputs.shapes = "[[6, 12]]"
        frame = node(2, name="/home/alice/acme/model.py(42): forward", deps=[1], duration=5, start=1_000_050)
        frame.attr.append(make_attr("tid", 1))
        ar = coll(3, CommType.ALL_REDUCE, 1 << 20, deps=[2], pg="acme_tp_group", duration=30, start=1_000_060)
        kernel = node(4, name="ncclKernel<AcmeTemplateArg>", deps=[3], duration=9, start=1_000_100)
        init = Node(id=5, name="## process_group:init ##", type=NodeType.METADATA_NODE)
        init.inputs.values = str(['[{"pg_name": "acme_tp_group", "pg_desc": "AcmeCorp-prod-cluster", '
                                  f'"ranks": {list(range(ranks))}}}]'])
        write_trace(f"{prefix}.{rank}.et", meta, [mm, frame, ar, kernel, init])
    return prefix


def _output_bytes(report) -> bytes:
    return b"".join(open(p, "rb").read() for p in report.files)


def test_the_default_policy_is_the_written_text() -> None:
    policy = default_policy()
    assert policy == load_policy(None)
    # every key of the written default is a field, with the value written there
    keys = re.findall(r"^([a-z_]+):", DEFAULT_POLICY_TEXT, flags=re.M)
    assert set(keys) == {"names", "keep_names", "timestamps", "jitter", "seed", "shapes", "comm_sizes", "tensors",
                         "types", "flops", "metadata", "attributes", "other_attributes"}
    assert policy.keeps("comm_size") and policy.keeps("pg_name") and not policy.keeps("op_schema")
    assert not policy.keeps("rf_id") and policy.keeps_name("ProfilerStep#3") and not policy.keeps_name("aten::mm")
    assert policy.keeps_name("cudaLaunchKernel") and not policy.keeps_name("cudaLaunchKernelOfAcme")


def test_policy_files_override_keys_and_refuse_mistakes(tmp_path) -> None:
    path = tmp_path / "p.yml"
    path.write_text("shapes: bucket\nattributes:\n  seq_id: keep\n")
    policy = load_policy(path)
    assert policy.shapes == "bucket" and policy.keeps("seq_id") and policy.keeps("comm_size")
    for text, message in (("shape: bucket\n", "unknown policy key 'shape' \\(did you mean 'shapes'\\?\\)"),
                          ("shapes: squash\n", "shapes must be one of keep, bucket, drop"),
                          ("jitter: 2\n", "jitter must be at least 0 and below 1"),
                          ("attributes:\n  seq_id: yes\n", "attribute 'seq_id': expected a word"),
                          ("- a\n", "a policy is a YAML mapping"), ("a: [\n", "not a YAML policy")):
        path.write_text(text)
        with pytest.raises(UsageError, match=f"^{re.escape(str(path))}: .*{message}"):
            load_policy(path)


@pytest.mark.parametrize("name, cls", [
    ("aten::mm", "gemm"), ("aten::addmm", "gemm"), ("aten::linear", "gemm"), ("MmBackward0", "gemm_backward"),
    ("autograd::engine::evaluate_function: AddmmBackward0", "gemm_backward"), ("ampere_sgemm_128x64_tn", "gemm"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_f32f32", "conv"), ("aten::conv2d", "conv"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"), ("aten::native_layer_norm", "norm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >(int)", "elementwise"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "comm"), ("nn.Module: AcmeNet_0", "python"),
    ("model.py(42): forward", "python"), ("fwd.mb0.layer3.attn_qkv", "gemm"), ("bwd.mb1.layer2.mlp_down", "gemm_backward"),
    ("Optimizer.step#AdamW.step", "optimizer"), ("aten::view", "view"), ("cudaLaunchKernel", "runtime"),
    ("AcmeFraudNet", "op")])
def test_op_classes(name: str, cls: str) -> None:
    assert op_class(name) == cls


def test_the_leak_search_finds_every_occurrence_and_nothing_else(monkeypatch) -> None:
    import etkit.anonymize.leaks as leaks

    monkeypatch.setattr(leaks, "_CHUNK", 16)  # strings across chunk borders
    data = b"\x00\x12xxAcmeNet\x07" * 3 + b"abc" + b"secret" + b"\x52\x01"
    assert find_in_bytes(data, [b"AcmeNet", b"secret", b"Acme_Net", b"crets", b"et\x07b"]) == {b"AcmeNet", b"secret"}
    assert find_in_bytes(data[-8:], [b"secret"]) == {b"secret"}
    assert is_text("gemm") and not is_text("cpu") and not is_text("[[16, 64]]")


@pytest.mark.parametrize(("count", "bits"), [(5, 24), (3000, 24), (20000, 16)])
def test_the_leak_search_agrees_with_a_plain_search(count: int, bits: int, monkeypatch) -> None:
    """Many needles (the bitmap nearly full with ``bits`` 16, prefixes shared, windows that pass the bitmap but
    start no needle): the same set as ``needle in data``."""
    import etkit.anonymize.leaks as leaks

    monkeypatch.setattr(leaks, "_BITS", bits)
    rng = np.random.default_rng(count)
    alphabet = np.frombuffer(b"abcdefgh\x00\x12:_", dtype=np.uint8)
    data = alphabet[rng.integers(0, alphabet.size, 30_000)].tobytes()
    needles = {alphabet[rng.integers(0, alphabet.size, int(rng.integers(4, 10)))].tobytes() for _ in range(count)}
    needles |= {data[i:i + int(rng.integers(4, 12))] for i in rng.integers(0, len(data) - 12, 20).tolist()}
    expected = {n for n in needles if n in data}
    assert 20 <= len(expected) < len(needles)
    assert find_in_bytes(data, needles) == expected


def test_the_leak_search_of_a_file_s_two_parts_is_that_of_the_file() -> None:
    """The GlobalMetadata record and the node records searched apart (not joined): the same needles, those that
    cross from one to the other included."""
    from etkit.anonymize.leaks import find_in_joined, needle_index

    rng = np.random.default_rng(12)
    alphabet = np.frombuffer(b"abcd\x00", dtype=np.uint8)
    for _ in range(300):
        head = alphabet[rng.integers(0, 5, int(rng.integers(0, 12)))].tobytes()
        body = alphabet[rng.integers(0, 5, int(rng.integers(0, 40)))].tobytes()
        data = head + body
        needles = {alphabet[rng.integers(0, 5, int(rng.integers(4, 9)))].tobytes() for _ in range(30)}
        needles |= {data[i:i + int(rng.integers(4, 14))] for i in range(max(len(head) - 8, 0), len(head))}
        needles = {n for n in needles if len(n) >= 4}
        assert find_in_joined(head, body, needle_index(n.decode() for n in needles)) == \
            {n for n in needles if n in data}


def test_no_string_of_the_input_reaches_the_output(tmp_path) -> None:
    prefix = _secret_job(tmp_path)
    report = anonymize(prefix, tmp_path / "share" / "job", executor=SerialExecutor())
    assert report.ok, report.lines()
    data = _output_bytes(report)
    assert report.files and all(not p.startswith(str(prefix)) for p in report.files)
    for secret in SECRETS + ("AcmeFraudNet-run7", "op_schema", "Tensor(float)", "String", "host"):
        assert secret.encode() not in data, secret  # checked here independently of the verb's own search
    assert report.strings_checked >= len(SECRETS)
    trace = load_trace(f"{tmp_path}/share/job.0.et")
    assert [trace.name(r) for r in range(len(trace))] == ["gemm", "python", "all_reduce", "comm", "metadata"]
    assert trace.num_ops[0] == 2 * 6 * 12 * 8  # the GEMM keeps its FLOPs: 2 m n k from its shapes
    assert trace.start[0] == 1 and trace.start[1] == 51  # shifted: the job's first timestamp is 1 us
    assert load_trace(f"{tmp_path}/share/job.1.et").start[0] == 2  # ranks keep their offset
    node = trace.node(0)
    assert node.inputs.values == "[[1, 1, 0, 64, 4, 'cpu'], [2, 2, 0, 128, 4, 'cpu'], None]"
    assert node.outputs.values == "[[3, 3, 0, 128, 4, 'cpu']]" and node.inputs.shapes == "[[6, 8], [8, 12], []]"
    assert not node.inputs.types and {a.name for a in node.attr} == {"is_cpu_op", "num_ops"}
    assert trace.pg_names()[2] == "1"
    job = load_job(f"{tmp_path}/share/job")
    assert job.groups.groups == {"1": (0, 1)}  # the group's name and description are gone, its ranks stay
    assert validate(f"{tmp_path}/share/job").ok


def test_the_proof_fails_when_the_policy_keeps_text(tmp_path) -> None:
    prefix = _secret_job(tmp_path)
    policy = load_policy(None).with_options(names="keep")
    report = anonymize(prefix, tmp_path / "share", policy=policy, executor=SerialExecutor())
    assert not report.ok and "AcmeFraudNet.acme_secret_layer::aten::mm" in report.leaks
    assert "/home/alice/acme/model.py(42): forward" in report.leaks


def test_a_string_of_one_rank_is_searched_in_every_rank_s_output(tmp_path, monkeypatch) -> None:
    """Each rank's task searches its own output for its own strings; a string only another rank's input holds
    is searched there by the verb (here rank 1's op_schema ``AlphaNetRank1``, inside a name rank 0 keeps)."""
    import etkit.anonymize as verb

    prefix = tmp_path / "job"
    for rank, (name, schema) in enumerate((("SecretAlphaNetRank1Layer", "aten::mm() -> Tensor"),
                                           ("aten::mm", "AlphaNetRank1"))):
        mm = node(1, name=name, duration=40, start=1_000 + rank)
        mm.attr.append(make_attr("op_schema", schema))
        write_trace(f"{prefix}.{rank}.et", GlobalMetadata(version="1.0.0"), [mm])
    scanned = []
    scan = verb._scan_each
    monkeypatch.setattr(verb, "_scan_each", lambda items, ex: scanned.extend(items) or scan(items, ex))
    report = anonymize(prefix, tmp_path / "out", policy=load_policy(None).with_options(names="keep"),
                       executor=SerialExecutor())
    assert report.leaks == ["AlphaNetRank1", "SecretAlphaNetRank1Layer", "aten::mm"]
    # the verb searched each output only for the strings its own task did not know
    rest = {str(path).rsplit(".", 2)[-2]: needles for path, needles in scanned}
    assert "AlphaNetRank1" in rest["0"] and "SecretAlphaNetRank1Layer" not in rest["0"]
    assert "SecretAlphaNetRank1Layer" in rest["1"] and "AlphaNetRank1" not in rest["1"]


def test_shapes_sizes_and_jitter_options(tmp_path) -> None:
    prefix = _secret_job(tmp_path)
    ex = SerialExecutor()
    base = load_policy(None)
    bucket = anonymize(prefix, tmp_path / "b", policy=base.with_options(shapes="bucket", comm_sizes="pow2"), executor=ex)
    t = load_trace(f"{tmp_path}/b.0.et")
    assert t.node(0).inputs.shapes == "[[8, 8], [8, 16], []]" and bucket.ok
    drop = anonymize(prefix, tmp_path / "d", policy=base.with_options(shapes="drop", tensors="drop"), executor=ex)
    node = load_trace(f"{tmp_path}/d.0.et").node(0)
    assert drop.ok and not node.HasField("inputs") and not node.HasField("outputs")
    jittered = [anonymize(prefix, tmp_path / f"j{i}", policy=base.with_options(jitter=0.2, seed=seed), executor=ex)
                for i, seed in enumerate((1, 1, 2))]
    a, b, c = (open(f"{tmp_path}/j{i}.0.et", "rb").read() for i in range(3))
    assert a == b != c  # seeded: the same seed gives the same bytes
    changes = []
    for rank in (0, 1):
        before, after = load_trace(f"{prefix}.{rank}.et"), load_trace(f"{tmp_path}/j2.{rank}.et")
        timed = before.duration > 0
        changes.append(np.abs(after.duration[timed].astype(float) - before.duration[timed]) / before.duration[timed])
    change = np.concatenate(changes)
    assert change.max() <= 0.2 and change.max() > 0 and jittered[2].max_jitter == pytest.approx(change.max())
    for rank in (0, 1):
        _assert_same_event_order(load_trace(f"{prefix}.{rank}.et"), load_trace(f"{tmp_path}/j2.{rank}.et"))


def _events(trace) -> np.ndarray:
    timed = trace.start > 0
    return np.concatenate([trace.start[timed], trace.start[timed] + trace.duration[timed]]).astype(np.int64)


def _assert_same_event_order(before, after) -> None:
    """The jitter moves events on a jittered clock: every start and end keeps its place among the rank's
    events (ties stay ties), so nesting and the order of a thread's ops are as measured."""
    old, new = _events(before), _events(after)
    order = np.argsort(old, kind="stable")
    assert (np.sign(np.diff(new[order])) == np.sign(np.diff(old[order]))).all()


def test_cuda_launch_calls_keep_their_names(tmp_path) -> None:
    """The GPU launch statistics find launches by the CUDA runtime call's name: a public API name, kept
    (and listed as kept on purpose); a name that only starts like one is not."""
    prefix = tmp_path / "g"
    nodes = [node(1, name="cudaLaunchKernel", duration=4, start=10), node(2, name="cudaLaunchKernelOfAcme", duration=4, start=20),
             node(3, name="cudaMemcpyAsync", duration=4, start=30)]
    write_trace(f"{prefix}.0.et", GlobalMetadata(), nodes)
    report = anonymize(prefix, tmp_path / "o", executor=SerialExecutor())
    out = load_trace(f"{tmp_path}/o.0.et")
    assert [out.name(i) for i in range(3)] == ["cudaLaunchKernel", "runtime", "cudaMemcpyAsync"]
    assert report.ok and "cudaLaunchKernelOfAcme" not in report.leaks


def test_comm_sizes_round_up_to_powers_of_two(tmp_path) -> None:
    prefix = tmp_path / "j"
    write_trace(f"{prefix}.0.et", GlobalMetadata(), [coll(1, CommType.ALL_GATHER, 3000), coll(2, CommType.ALL_REDUCE, 4096)])
    anonymize(prefix, tmp_path / "o", policy=load_policy(None).with_options(comm_sizes="pow2"), executor=SerialExecutor())
    assert load_trace(f"{tmp_path}/o.0.et").comm_size.tolist() == [4096, 4096]


def test_the_output_may_not_be_the_input(tmp_path) -> None:
    prefix = _secret_job(tmp_path)
    with pytest.raises(EtkitError, match="refusing to write over an input"):
        anonymize(prefix, prefix, executor=SerialExecutor())
    assert load_trace(f"{prefix}.0.et").name(0).startswith("AcmeFraudNet")


def _cli(argv: list[str]) -> int:
    from etkit.cli import anonymize as verb

    parser = argparse.ArgumentParser()
    verb.register(parser.add_subparsers())
    args = parser.parse_args(["anonymize", *argv])
    return args.func(args)


def test_cli_prints_the_policy_and_the_proof(tmp_path, capsys) -> None:
    assert _cli(["--print-policy"]) == 0
    assert capsys.readouterr().out == DEFAULT_POLICY_TEXT
    assert _cli(["--print-policy", "--shapes", "drop"]) == 0
    assert "shapes: drop" in capsys.readouterr().out
    prefix = _secret_job(tmp_path)
    assert _cli([str(prefix), "-o", str(tmp_path / "o"), "-j", "1", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "searched in every output byte" in out and "none found" in out and "validation: ok" in out
    (tmp_path / "leaky.yml").write_text("attributes:\n  op_schema: keep\n")
    assert _cli([str(prefix), "-o", str(tmp_path / "o2"), "-j", "1", "--policy", str(tmp_path / "leaky.yml")]) == 1
    assert "1 FOUND: 'aten::mm(Tensor self, Tensor mat2) -> Tensor'" in capsys.readouterr().out


@pytest.fixture(scope="module")
def hybrid(converted_job):
    return converted_job("hybrid_dp_tp_ws4")


@pytest.mark.shared_data
def test_a_real_job_keeps_its_simulation_and_analysis(hybrid, tmp_path) -> None:
    """hybrid_dp_tp_ws4 (tp 2 x dp 2, gloo): every input string searched independently; identical simulation
    and breakdown with durations and sizes kept (the guide's example checks 2 % jitter: tests/scale/test_guide.py)."""
    ex = SerialExecutor()
    report = anonymize(hybrid, tmp_path / "hy", executor=ex)
    assert report.ok and report.ranks == 4 and report.flops_derived > 0
    data = _output_bytes(report)
    texts = set()
    for rank in range(4):
        trace = load_trace(f"{hybrid}.{rank}.et")
        texts.update(trace.strings)
        for n in trace.nodes():
            texts.update(a.string_val for a in n.attr if a.WhichOneof("value") == "string_val")
    texts = {s for s in texts if is_text(s) and not s.startswith("ProfilerStep#")}
    assert len(texts) > 150 and {"aten::mm", "c10d::allreduce_"} <= texts
    assert [s for s in texts if s.encode() in data] == []
    original = job_view(hybrid, executor=ex)
    same = compare_views(original, job_view(tmp_path / "hy", executor=ex))
    assert same.identical, same.lines()
    jittered = anonymize(hybrid, tmp_path / "hj", policy=load_policy(None).with_options(jitter=0.02, seed=3), executor=ex)
    assert jittered.ok and 0.0 < jittered.max_jitter <= 0.02
    for rank in range(4):
        _assert_same_event_order(load_trace(f"{hybrid}.{rank}.et"), load_trace(f"{tmp_path}/hj.{rank}.et"))


def test_the_node_by_node_path_writes_the_same_bytes(tmp_path, monkeypatch) -> None:
    """Records the loader's walk leaves out are walked again (record_parts), those the vectorised reader
    declines parsed one by one: the output is the same on every path."""
    import etkit.anonymize.rank as rank

    prefix = _secret_job(tmp_path)
    policy = load_policy(None).with_options(shapes="bucket")
    calls = {"walked": 0, "walk": 0}

    def counted(fn, key):  # noqa: ANN001, ANN202
        def wrapper(*a, **k):  # noqa: ANN002, ANN003, ANN202
            out = fn(*a, **k)
            calls[key] += out is not None
            return out
        return wrapper

    monkeypatch.setattr(rank, "walked_parts", counted(rank.walked_parts, "walked"))
    anonymize(prefix, tmp_path / "fast", policy=policy, executor=SerialExecutor())
    assert calls["walked"] == 2  # both ranks from the loader's spans
    monkeypatch.setattr(rank, "walked_parts", lambda *a, **k: None)
    monkeypatch.setattr(rank, "record_parts", counted(rank.record_parts, "walk"))
    anonymize(prefix, tmp_path / "walk", policy=policy, executor=SerialExecutor())
    assert calls["walk"] == 2
    monkeypatch.setattr(rank, "record_parts", lambda *a, **k: None)
    anonymize(prefix, tmp_path / "slow", policy=policy, executor=SerialExecutor())
    for r in (0, 1):
        fast = open(f"{tmp_path}/fast.{r}.et", "rb").read()
        assert fast == open(f"{tmp_path}/walk.{r}.et", "rb").read() == open(f"{tmp_path}/slow.{r}.et", "rb").read()


@pytest.mark.parametrize("spacing", ["canonical", "mixed"])
def test_values_rewritten_vectorised_as_one_by_one(spacing) -> None:
    """IoRewriter.values_sides (np.unique numbering, numpy string functions) writes what values_many writes,
    the tensor and storage counts and the strings found included."""
    from etkit.anonymize.ioinfo import starts_of

    rng = np.random.default_rng(5)
    sep = (lambda: ", ") if spacing == "canonical" else (lambda: rng.choice([", ", ",", ",  "]))

    def tensor() -> str:
        tid, sid = rng.integers(0, 40, 2)
        lead = "0" if spacing == "mixed" and rng.random() < 0.1 else ""
        device = rng.choice(["cpu", "cuda:0", "cuda:1", "meta"])
        return f"[{lead}{tid}{sep()}{sid}{sep()}{rng.integers(-1, 9)}{sep()}{rng.integers(0, 999)}{sep()}4{sep()}'{device}']"

    def text() -> str:
        items = [rng.choice([tensor(), "'secret name'", "3.5", "True", "\"it's\"", f"[{tensor()}, {tensor()}]", "[]", ""])
                 for _ in range(rng.integers(0, 5))]
        return "[" + ", ".join(i for i in items if i) + "]" if rng.random() > 0.1 else ""

    sides = [[text().encode() for _ in range(60)] for _ in range(2)]
    one, vec = sides_agree(sides)
    assert vec.tensors_renumbered == one.tensors_renumbered > 20 and vec.found == one.found
    assert starts_of(np.array([3, 0, 2]), 1).tolist() == [0, 4, 5]


def test_unique_rows_are_numpy_s_unique_rows() -> None:
    """The FLOPs' distinct (name, shapes, shapes) keys through one int64 key per row: np.unique's rows and inverse."""
    from etkit.anonymize.rank import _unique_rows

    rng = np.random.default_rng(1)
    for trial in range(100):
        keys = rng.integers(-1, rng.integers(1, 50), (int(rng.integers(1, 300)), 3))
        if trial == 0:
            keys[0, 0] = 1 << 58  # too wide for one key: np.unique itself
        unique, inverse = _unique_rows(keys)
        expected, expected_inverse = np.unique(keys, axis=0, return_inverse=True)
        assert (unique == expected).all() and (inverse == expected_inverse.ravel()).all(), trial
