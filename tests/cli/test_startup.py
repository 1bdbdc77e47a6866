"""``etkit --help`` and ``etkit VERB --help`` start fast: a verb imports only what it uses, and help uses
no numpy, protobuf, YAML, rich or simulator (the CPU time is in benchmarks/bench_real.py)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: What no ``--help`` may import (each costs 0.05-0.3 s of CPU on its own).
HEAVY = ("numpy", "google.protobuf", "yaml", "orjson", "rich", "torch", "etkit.format", "etkit.model",
         "etkit.simulate", "etkit.analyze", "etkit.generate", "etkit.pytorch", "concurrent.futures.process")

_PROBE = """
import atexit, json, runpy, sys
sys.argv = ["etkit", *sys.argv[1:]]
# (the program may leave without the interpreter's teardown, but after its atexit callbacks)
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
runpy.run_module("etkit", run_name="__main__")
"""


def _imported(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True)
    assert "usage: etkit" in proc.stdout
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def _verbs() -> list[str]:
    """Every verb and sub-verb (``generate llm``, ``convert pytorch``, ...)."""
    from etkit.cli.main import build_parser

    def walk(parser: argparse.ArgumentParser, words: str) -> list[str]:
        out = [words] if words else []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    out += walk(child, f"{words} {name}".strip())
        return out

    return sorted(walk(build_parser(), ""))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.startswith(HEAVY))


def test_info_help_imports_nothing_heavy() -> None:
    modules = _imported("info", "--help")
    assert "etkit.cli.info" in modules
    assert _heavy(modules) == []


@pytest.mark.parametrize("verb", ["", *_verbs()])
def test_every_help_imports_nothing_heavy(verb: str) -> None:
    assert _heavy(_imported(*verb.split(), "--help")) == [], verb


def test_lazy_package_names_still_import() -> None:
    import etkit

    assert etkit.load_trace.__module__ == "etkit.model.trace"
    assert {"Job", "load_job", "open_trace", "convert_job"} <= set(dir(etkit))
    with pytest.raises(AttributeError):
        etkit.no_such_name  # noqa: B018


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _options(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    """Every option and positional of a parser and its sub-verbs, with their help."""
    out: list[tuple[str, ...]] = []
    for action in parser._actions:
        out.append((*action.option_strings, str(action.dest), str(action.help)))
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out += [(name, *row) for row in _options(child)]
    return out


def test_a_command_line_builds_only_its_verb_and_the_same_parser_for_it() -> None:
    from etkit.cli.main import build_parser

    full = _subparsers(build_parser())
    for verb, parser in full.items():
        alone = _subparsers(build_parser(["-q", verb, "x", "--help"]) if verb != "demo" else build_parser([verb]))
        assert set(alone) == {verb} or (verb in {"to-json", "from-json"} and set(alone) == {"to-json", "from-json"})
        assert _options(alone[verb]) == _options(parser), verb
    for line in ([], ["--help"], ["--version"], ["nosuch", "x"]):  # no verb, or a word that is none: all of them
        assert set(_subparsers(build_parser(line))) == set(full), line


def test_a_verb_imports_no_other_verb_module() -> None:
    modules = _imported("info", "--help")
    assert sorted(m for m in modules if m.startswith("etkit.cli.") and m not in
                  {"etkit.cli.main", "etkit.cli.common", "etkit.cli.guard", "etkit.cli.info"}) == []


#: What writing already-encoded records needs beside the standard library: no numpy, no protobuf, no columnar.
WRITER_HEAVY = ("numpy", "google.protobuf", "etkit.format.columnar", "etkit.format.wire", "etkit.format.schema")

_RUN = """
import json, runpy, sys
sys.argv = ["etkit", *sys.argv[1:]]
from etkit.cli.main import main
code = main()
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
sys.exit(code)
"""


def _run_imports(tmp_path: Path, *args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _RUN, *args], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


@pytest.mark.shared_data
def test_from_json_and_to_json_import_no_numpy(upstream: Path, tmp_path: Path) -> None:
    """The JSON twin's verbs of a real trace: to-json needs neither numpy nor protobuf, from-json no numpy."""
    et = upstream / "astra-sim-astra-sim/examples/workload/microbenchmarks/reduce_scatter/4npus_1MB/reduce_scatter.0.et"
    to = _run_imports(tmp_path, "to-json", str(et), "-o", str(tmp_path / "t.json"))
    assert sorted(m for m in to if m.startswith(WRITER_HEAVY)) == []
    back = _run_imports(tmp_path, "from-json", str(tmp_path / "t.json"), "-o", str(tmp_path / "t.et"))
    assert sorted(m for m in back if m.startswith(("numpy", "etkit.format.columnar", "etkit.format.wire"))) == []
    assert (tmp_path / "t.et").read_bytes() == et.read_bytes()


def test_a_writer_of_encoded_records_imports_no_numpy_or_protobuf(tmp_path: Path) -> None:
    """TraceWriter of records already encoded (from-json, the converters) loads no numpy, protobuf or columnar;
    the same file as one whose GlobalMetadata and Node messages protobuf serialised."""
    probe = """
import json, sys
from etkit.format.stream import TraceWriter
with TraceWriter(sys.argv[1]) as w:
    w.write_record(bytes.fromhex("0801"))
    w.write_framed(bytes.fromhex("020802020803"), 2)
print(json.dumps(sorted(sys.modules)))
"""
    out = tmp_path / "t.et"
    proc = subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True, text=True, check=True)
    assert sorted(m for m in json.loads(proc.stdout) if m.startswith(WRITER_HEAVY)) == []
    from etkit.format.schema import GlobalMetadata, Node
    from etkit.format.stream import frame

    nodes = [Node(id=1), Node(id=2), Node(id=3)]
    assert out.read_bytes() == b"".join(frame(m.SerializeToString()) for m in (GlobalMetadata(), *nodes))


_LEAVE = """
import atexit, gzip, sys
from etkit.cli import guard
atexit.register(lambda: print("atexit ran"))
held = (gzip.open if sys.argv[-1] == "gzip" else open)(sys.argv[1], "wt") if len(sys.argv) > 1 else None
if held is not None:
    held.write("buffered, not yet flushed")
print("done", end="")
guard.leave_when_done(3)
print(" (the usual exit)")
sys.exit(4)
"""


def test_a_finished_program_leaves_without_teardown_only_when_nothing_is_left_to_write(tmp_path: Path) -> None:
    """With only the standard streams open, the program ends at once with the verb's code, its atexit
    callbacks run and stdout flushed; with a file still open for writing it returns (its atexit callbacks
    run already), and the usual exit flushes that file: a file of io's own classes, or of a Python subclass
    of them (gzip's, whose compressed bytes are held until it is closed)."""
    fast = subprocess.run([sys.executable, "-c", _LEAVE], capture_output=True, text=True)
    assert (fast.returncode, fast.stdout) == (3, "doneatexit ran\n")
    for opener in ("open", "gzip"):
        held = tmp_path / f"held-{opener}.txt"
        usual = subprocess.run([sys.executable, "-c", _LEAVE, str(held), opener], capture_output=True, text=True)
        assert (usual.returncode, usual.stdout) == (4, "doneatexit ran\n (the usual exit)\n")  # (callbacks run once)
        read = gzip.open(held, "rt").read() if opener == "gzip" else held.read_text()
        assert read == "buffered, not yet flushed", opener


@pytest.mark.shared_data
def test_the_program_leaves_with_its_outputs_as_the_usual_exit(upstream: Path, tmp_path: Path) -> None:
    """``python -m etkit`` (which leaves without teardown) against the library's ``main`` followed by the
    usual exit, on a real job: the same file, the same printed lines, the same exit status, error or not."""
    job = upstream / "astra-sim-astra-sim/examples/workload/microbenchmarks/reduce_scatter/4npus_1MB/reduce_scatter"
    usual = "import sys; sys.argv[0] = 'etkit'; from etkit.cli.main import main; sys.exit(main())"
    for args in (["info", str(job), "--json", "{out}"], ["to-json", f"{job}.1.et", "-o", "{out}"],
                 ["info", str(tmp_path / "none.0.et")]):
        runs = []
        for name, program in (("fast", ["-m", "etkit"]), ("usual", ["-c", usual])):
            out = tmp_path / name
            line = [a.replace("{out}", str(out)) for a in args]
            proc = subprocess.run([sys.executable, *program, *line], capture_output=True, text=True, cwd=tmp_path)
            runs.append((proc.returncode, proc.stdout.replace(str(out), "OUT"), proc.stderr.replace(str(out), "OUT"),
                         out.read_bytes() if out.exists() else None))
        assert runs[0] == runs[1], args
        assert runs[0][0] == (2 if "none" in args[-1] else 0), runs[0]


def test_a_lazy_module_is_imported_on_first_use_and_then_bound_in_its_place() -> None:
    import json as real

    from etkit.lazy import LazyModule

    namespace: dict[str, object] = {}
    namespace["j"] = proxy = LazyModule("json", "j", namespace)
    assert namespace["j"] is proxy
    assert proxy.dumps([1]) == "[1]"
    assert namespace["j"] is real
    with pytest.raises(AttributeError):
        proxy.no_such_name  # noqa: B018


class _WarnsWhenAskedItsClass:
    """Like torch's deprecated ``torch.distributed.reduce_op``: asking the object its ``__class__`` warns."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: D401
        import warnings

        warnings.warn("asked my class", FutureWarning, stacklevel=2)
        return type(self)


def test_the_exit_check_asks_no_object_its_class() -> None:
    """The fast exit's scan for files open for writing goes over every live object; it must not make one warn
    (``etkit replay`` printed torch's FutureWarning at exit) or run its code."""
    import warnings

    from etkit.cli import guard

    alive = _WarnsWhenAskedItsClass()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(guard._open_for_writing(), bool)
    del alive


#: protobuf's runtime and descriptors (``google.protobuf.message`` alone is its light pure-Python base).
PROTOBUF_RUNTIME = ("google._upb", "google.protobuf.descriptor", "google.protobuf.internal")


@pytest.mark.shared_data
def test_converting_a_host_trace_and_analysing_a_kineto_trace_load_no_protobuf(upstream: Path, tmp_path: Path) -> None:
    """``convert pytorch`` writes its records and metadata at byte level, and ``analyze`` of a Kineto trace reads
    the converted bytes through the columns: neither loads protobuf (0.03 s of CPU a command), nor tempfile,
    shutil or fractions (12, 7 and 7 ms), nor numpy.ma (np.unique's and np.percentile's: etkit.arrays), msgspec
    (the typed paths the C kernels leave unused) or hashlib (a job of one rank); the ET is the one protobuf reads,
    node for node."""
    from etkit.format.stream import open_trace

    host = upstream / "facebookresearch-param/et_replay/tests/inputs/1.0.3-chakra.0.0.4/resnet_1gpu_et.json.gz"
    converted = _run_imports(tmp_path, "convert", "pytorch", str(host), "-o", str(tmp_path / "r"), "-j", "1", "-q")
    kineto = upstream / "hta/tests/data/nccl_parser_config"
    analysed = _run_imports(tmp_path, "analyze", str(kineto), "-q", "-j", "1", "--csv", str(tmp_path / "csv"))
    for modules in (converted, analysed):
        assert sorted(m for m in modules if m.split(".")[0] in ("tempfile", "shutil", "fractions", "msgspec", "hashlib",
                                                                "_hashlib") or m.startswith(PROTOBUF_RUNTIME)
                      or m == "numpy.ma" or m.startswith("numpy.ma.")) == []
    # nor the modules (and their patterns) of what analyze of a Kineto trace never runs: the diff, the literal reader,
    # the gzip module (a .gz input is read through zlib: gzip is for its error class, when a read fails)
    assert sorted(m for m in analysed if m in ("etkit.analyze.diff", "etkit.literal", "gzip")) == []
    with open_trace(tmp_path / "r.0.et") as reader:
        assert reader.metadata.version == "1.0.0" and sum(1 for _ in reader) > 14_000
    assert sorted(p.name for p in (tmp_path / "csv").iterdir())


_MMAPPED = """
import ctypes, sys
from etkit.cli import guard

class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]

info = ctypes.CDLL(None).mallinfo2
info.restype = Info
if sys.argv[1] == "tuned":
    guard.reuse_freed_memory()
before = info().hblks
block = bytearray(4 << 20)
print(info().hblks - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_heap_tuning_keeps_blocks_of_a_few_mib_in_the_heap(tmp_path: Path) -> None:
    """reuse_freed_memory (etkit's mallopt binding) takes effect: a 4 MiB block comes from the heap, where
    glibc's default would have mapped it on its own."""
    from etkit.cli import guard

    assert type(guard._mallopt()).__name__ == "builtin_function_or_method"  # (not ctypes': built here)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    mapped = {how: subprocess.run([sys.executable, "-c", _MMAPPED, how], capture_output=True, text=True, check=True,
                                  env=env).stdout.strip() for how in ("usual", "tuned")}
    assert mapped == {"usual": "1", "tuned": "0"}
