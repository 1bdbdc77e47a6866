"""anonymize's C loops (etkit.anonymize._scan) and the survey's kernel path give what their numpy paths give.

Each function is run both ways on the same inputs (random texts made to hit the edge cases, and the
values texts of real converted jobs), and whole jobs are anonymised both ways, byte for byte.
"""

from __future__ import annotations

import numpy as np
import pytest

from etkit.anonymize import anonymize, kernel, load_policy
from etkit.anonymize import ioinfo as io
from etkit.anonymize.leaks import find_in_bytes
from etkit.anonymize.rank import _joined_texts
from etkit.executor import SerialExecutor
from etkit.format import wire
from etkit.format.parts import joined_spans
from etkit.model.survey import survey_file

from .test_anonymize import _secret_job
from .test_ioinfo import _random_text

SCAN = kernel.SCAN
WALK = wire.KERNEL


def both(monkeypatch, fn):  # noqa: ANN001, ANN201 - fn() under the C loops, then under the numpy paths
    out = []
    for scan in (SCAN, None):
        monkeypatch.setattr(kernel, "SCAN", scan)
        out.append(fn())
    return out


def test_the_kernels_are_built() -> None:
    assert WALK is not None, "etkit.format._walk is not built"
    assert SCAN is not None, "etkit.anonymize._scan is not built: `pip install -e .` compiles it (it needs a C compiler)"


def _odd_text(rng: np.random.Generator) -> bytes:
    """Pieces of tensors, near misses and separators in any order: candidates cut short, leading zeros, ids too long,
    minus signs, quotes, escapes and the \\x1e/\\x1f separators where a device would end."""
    pieces = [b"[", b"]", b", ", b",", b" ", b"'", b"\\", b"\x1e", b"\x1f", b"-", b"0", b"7", b"12", b"cpu", b"'cpu'",
              b"123456789012345678", b"1234567890123456789", b"[1, 2, 0, 4, 4, 'cpu']", b"[01, 2, 0, 4, 4, 'cpu']",
              b"[3, 4, -5, 6, 7, 'cuda:1']", b"[3, 40, 0, 6, 7, '", b"None", b"\x00", b"\xff"]
    return b"".join(pieces[i] for i in rng.integers(0, len(pieces), int(rng.integers(0, 30))))


def _same_spans(a: io.TensorSpans | None, b: io.TensorSpans | None) -> bool:
    if a is None or b is None:
        return a is b
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)


def test_canonical_tensors_in_c_are_numpy_s(monkeypatch) -> None:
    rng = np.random.default_rng(21)
    seen = {"declined": 0, "none": 0, "some": 0}
    for trial in range(6000):
        text = _odd_text(rng) if trial % 2 else b"\x1f".join(_random_text(rng) for _ in range(int(rng.integers(1, 4))))
        c, numpy = both(monkeypatch, lambda text=text: io.canonical_tensors(text))
        assert _same_spans(c, numpy), text
        seen["declined" if c is None else "some" if c.start.size else "none"] += 1
    assert min(seen.values()) > 300, seen


def test_nones_cut_and_assembly_in_c_are_numpy_s(monkeypatch) -> None:
    """_nones, the cut of the tensors and the assembly of the renumbered ones: values_sides both ways, with the
    tensor counts and the strings found."""
    rng = np.random.default_rng(4)
    alphabet = np.frombuffer(b"[](), \t\n\r\x0b\x0c\x1e\x1fab1.-\\x\xff\x00", dtype=np.uint8)
    for _ in range(500):
        text = rng.choice(alphabet, int(rng.integers(0, 60))).tobytes()
        c, numpy = both(monkeypatch, lambda text=text: io._nones(text))
        assert c == numpy == io._OTHER_B.sub(b"None", text), text
    for trial in range(60):
        sides = [[_random_text(rng, 0.0 if trial % 3 else 0.02) for _ in range(int(rng.integers(0, 40)))]
                 for _ in range(2)]
        packed = [(b"\x1f".join(side), np.fromiter(map(len, side), dtype=np.int64, count=len(side))) for side in sides]

        def rewrite(packed=packed):  # noqa: ANN001, ANN202
            rewriter = io.IoRewriter()
            out = rewriter.values_sides(*packed)
            return ([(blob, starts.tolist(), lengths.tolist()) for blob, starts, lengths in out],
                    rewriter.tensors_renumbered, rewriter.found)
        c, numpy = both(monkeypatch, rewrite)
        assert c == numpy, trial


def test_joined_texts_in_c_are_joined_spans(monkeypatch) -> None:
    rng = np.random.default_rng(9)
    blob = rng.integers(0, 256, 5000, dtype=np.uint8).tobytes()
    for _ in range(100):
        k = int(rng.integers(0, 50))
        off = rng.integers(-1, 4000, k).astype(np.int64)
        length = rng.integers(0, 1000, k).astype(np.int64)
        c, numpy = both(monkeypatch, lambda off=off, length=length: _joined_texts(blob, off, length))
        assert c == numpy == joined_spans(blob, off, length, b"\x1f")


def test_first_use_numbers_in_c_are_numpy_s(monkeypatch) -> None:
    """Renumbering by first use: hashed in C, sorted by np.unique otherwise (extreme values, repeats, none)."""
    rng = np.random.default_rng(2)
    extreme = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, -1, np.iinfo(np.int64).max, 0])
    for trial in range(100):
        keys = extreme if trial == 0 else np.zeros(0, dtype=np.int64) if trial == 1 else \
            rng.integers(-5, int(rng.integers(1, 1000)), int(rng.integers(1, 3000))).astype(np.int64)
        (c, c_count), (numpy, numpy_count) = both(monkeypatch, lambda keys=keys: io._first_use_ranks(keys))
        assert c.tolist() == numpy.tolist() and c_count == numpy_count == np.unique(keys).size


@pytest.mark.parametrize("count", [3, 3000])
def test_the_leak_search_in_c_is_numpy_s(count: int, monkeypatch) -> None:
    rng = np.random.default_rng(count)
    alphabet = np.frombuffer(b"abcdefgh\x00\x12:_", dtype=np.uint8)
    data = alphabet[rng.integers(0, alphabet.size, 50_000)].tobytes()
    needles = {alphabet[rng.integers(0, alphabet.size, int(rng.integers(4, 10)))].tobytes() for _ in range(count)}
    needles |= {data[i:i + int(rng.integers(4, 12))] for i in rng.integers(0, len(data) - 12, 20).tolist()}
    needles |= {data[:5], data[-4:], data[-7:]}  # at the very start and end
    c, numpy = both(monkeypatch, lambda: find_in_bytes(data, needles))
    assert c == numpy == {n for n in needles if n in data}


def _job_bytes(prefix, out) -> list[bytes]:  # noqa: ANN001
    return [open(p, "rb").read() for p in sorted(out.parent.glob(out.name + ".*"))]


def test_a_job_anonymised_in_c_and_with_numpy_is_the_same(tmp_path, monkeypatch) -> None:
    prefix = _secret_job(tmp_path, ranks=3)
    policy = load_policy(None).with_options(shapes="bucket", jitter=0.02, seed=5)

    def run(tag: str):  # noqa: ANN202
        report = anonymize(prefix, tmp_path / tag, policy=policy, executor=SerialExecutor())
        assert report.ok
        return _job_bytes(prefix, tmp_path / tag)
    monkeypatch.setattr(kernel, "SCAN", SCAN)
    fast = run("c")
    monkeypatch.setattr(kernel, "SCAN", None)
    monkeypatch.setattr(wire, "KERNEL", None)  # the survey's numpy walk too
    assert run("numpy") == fast and len(fast) == 4


@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["hybrid_dp_tp_ws4", "fsdp2_mlp_ws2", "pp_sendrecv_ws2", "cnn_single"])
def test_real_jobs_anonymised_in_c_and_with_numpy_are_the_same(name: str, converted_job, tmp_path, monkeypatch) -> None:
    """Real converted PyTorch jobs (their values texts: tensors, strings, scalars, lists), default policy and
    jittered: the same bytes both ways, and the survey of every rank the same from the loader and the walk."""
    prefix = converted_job(name)
    for options in ({}, {"jitter": 0.02, "seed": 1, "shapes": "bucket", "comm_sizes": "pow2"}):
        policy = load_policy(None).with_options(**options)
        outs = []
        for scan, walk in ((SCAN, WALK), (None, None)):
            monkeypatch.setattr(kernel, "SCAN", scan)
            monkeypatch.setattr(wire, "KERNEL", walk)
            tag = f"{'c' if scan else 'numpy'}{len(options)}"
            assert anonymize(prefix, tmp_path / tag, policy=policy, executor=SerialExecutor()).ok
            outs.append(_job_bytes(prefix, tmp_path / tag))
        assert outs[0] == outs[1] and outs[0]
    monkeypatch.setattr(kernel, "SCAN", SCAN)
    for path in sorted(prefix.parent.glob(prefix.name + ".*.et")):
        surveys = []
        for walk in (WALK, None):
            monkeypatch.setattr(wire, "KERNEL", walk)
            s = survey_file(path, ints=("ts_ns", "comm_src", "comm_dst"), start=True)
            surveys.append((s.types.tolist(), s.pg_names, s.declared.groups, s.start.tolist(),
                            {k: v.tolist() for k, v in s.ints.items()}))
        assert surveys[0] == surveys[1], path
