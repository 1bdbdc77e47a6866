"""etkit on real data, side by side with the reference tools (issue 15): whole processes, CPU time and peak RSS.

Inputs (read from ../shared/data; larger ones made in a temporary folder by ``real_shapes.py``):

- every upstream ET vector of >= 10,000 nodes (Chakra's own converter output, full attributes and IOInfo),
  and a 1M-node real-shaped ET that repeats the largest of them with fresh ids;
- param's PyTorch host traces (resnet, schemas 1.0.3 and 1.1.0) and a 1M-node real-shaped host trace;
- STAGE's 8-rank jobs, and a generated 1,024-rank Llama-3-70B job (``etkit generate llm``).

Per verb, against its target (CPU time of the whole process, the same input, runs of the two tools
alternating, medians): ``to-json`` vs ``chakra_jsonizer``; ``from-json``; ``convert pytorch`` vs
``chakra_converter PyTorch`` (and the orjson parse of the same JSON, the floor); ``validate``, ``info``,
``analyze``; whole jobs (``info``, ``validate``, the simulator's loading); ``--help`` start-up.
The reference tools come from ``$ETKIT_REF_VENV`` (``make refenv``; default ``.venv-ref``); without them
etkit's side is measured alone.

    python benchmarks/bench_real.py [--runs 3] [--large-runs 1] [--nodes 1000000] [--skip-large-ref]
    python benchmarks/bench_real.py --only convert --nodes 0     # param's host traces alone, no 1M-node input
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import orjson  # noqa: E402
from processes import Run, measure  # noqa: E402  (benchmarks/: how a process is timed, one home)
from real_shapes import repeat_et, repeat_host_trace  # noqa: E402

import etkit  # noqa: E402
from etkit.format.stream import open_trace  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
UPSTREAM = DATA / "upstream"
PARAM = UPSTREAM / "facebookresearch-param" / "et_replay" / "tests" / "inputs"
HOST_TRACES = (PARAM / "1.0.3-chakra.0.0.4" / "resnet_1gpu_et.json.gz", PARAM / "1.1.0-chakra.0.0.4" / "resnet_2gpu_et.json.gz")
STAGE = UPSTREAM / "generated-by-stage-3a7f49c"
REF_BIN = Path(os.environ.get("ETKIT_REF_VENV", REPO / ".venv-ref")) / "bin"
ETKIT = [sys.executable, "-m", "etkit"]
VERBS = ("info", "validate", "to-json", "from-json", "link", "convert", "generate", "analyze", "diff", "timeline",
         "graph", "report", "simulate", "calibrate", "replay", "collect", "demo")

# Targets (issue 15)
TO_JSON_RATIO, CONVERT_RATIO = 10.0, 8.0
FROM_JSON_RATE, CHECK_RATE, JOB_RATE, JOB_SECONDS = 500_000, 500_000, 1_000_000, 3.0
CONVERT_MB_PER_100K, HELP_CPU = 300.0, 0.15


def alternate(commands: dict[str, list[str]], runs: int, cwd: Path, ok: tuple[int, ...] = (0,)) -> dict[str, Run]:
    """Each command ``runs`` times, the commands taking turns; the median of each figure per command."""
    seen: dict[str, list[Run]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            seen[name].append(measure(cmd, cwd, ok))
    return {name: Run(statistics.median(r.cpu for r in rs), statistics.median(r.peak_mb for r in rs),
                      statistics.median(r.wall for r in rs)) for name, rs in seen.items()}


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def node_count(path: Path) -> int:
    with open_trace(path) as reader:
        return sum(1 for _ in reader.records())


def ref(tool: str) -> list[str] | None:
    exe = REF_BIN / tool
    return [str(exe)] if exe.exists() else None


def plain_copy(src: Path, folder: Path) -> Path:
    """``src`` decompressed into ``folder`` (chakra_converter reads plain JSON only)."""
    dst = folder / src.name.removesuffix(".gz")
    with gzip.open(src) if src.suffix == ".gz" else open(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    return dst


# -- sections ----------------------------------------------------------------------------------------

def bench_startup(runs: int, tmp: Path) -> None:
    print("== start-up: CPU of `etkit --help` and `etkit VERB --help` (target < 0.15 s each)")
    commands = {"--help": ETKIT + ["--help"]} | {verb: ETKIT + [verb, "--help"] for verb in VERBS}
    results = alternate(commands, runs, tmp)
    worst = max(results.values(), key=lambda r: r.cpu).cpu
    for name, r in results.items():
        print(f"  etkit {name:10s} {r.cpu:5.2f} s CPU, {r.peak_mb:4.0f} MB  {verdict(r.cpu < HELP_CPU)}")
    print(f"  slowest {worst:.2f} s: {verdict(worst < HELP_CPU)}")


def bench_to_json(vectors: list[tuple[Path, int]], runs: int, large_runs: int, tmp: Path, large_ref: bool) -> None:
    jsonizer = ref("chakra_jsonizer")
    print("== to-json vs chakra_jsonizer (CPU >= 10x, peak memory <= jsonizer's)")
    for path, nodes in vectors:
        large = nodes > 100_000
        commands = {"etkit": ETKIT + ["to-json", str(path), "-o", str(tmp / "twin.json")]}
        if jsonizer and (large_ref or not large):
            commands["jsonizer"] = jsonizer + ["--input_filename", str(path), "--output_filename", str(tmp / "j.txt")]
        r = alternate(commands, large_runs if large else runs, tmp)
        e = r["etkit"]
        line = f"  {path.name} ({nodes:,} nodes): etkit {e.cpu:.2f} s {e.peak_mb:.0f} MB"
        if "jsonizer" in r:
            j = r["jsonizer"]
            ratio, memory = j.cpu / e.cpu, e.peak_mb / j.peak_mb
            line += (f" | jsonizer {j.cpu:.2f} s {j.peak_mb:.0f} MB | {ratio:.1f}x CPU ({verdict(ratio >= TO_JSON_RATIO)}),"
                     f" memory {memory:.2f}x jsonizer's ({verdict(memory <= 1)})")
        else:
            line += f" | {nodes / e.cpu:,.0f} nodes/s (no reference run)"
        print(line)


#: A measure of from-json against a JSON parser: orjson's parse of every line of the twin, nothing else.
_PARSE_TWIN = ("import orjson, sys\nwith open(sys.argv[1], 'rb') as f:\n    f.readline()\n    for line in f:\n"
               "        line = line.strip()\n        if line != b']}':\n"
               "            orjson.loads(line[:-1] if line.endswith(b',') else line)\n")


#: The floor of from-json: the twin read and the .et's bytes written (to a new file, as from-json writes it), in
#: reads and writes of 1 MiB, nothing else.
_COPY_TWIN = ("import sys\nbuf = bytearray(1 << 20)\nwith open(sys.argv[1], 'rb') as f:\n    while f.readinto(buf):\n"
              "        pass\nwith open(sys.argv[2], 'rb') as f, open(sys.argv[3], 'wb') as out:\n"
              "    while n := f.readinto(buf):\n        out.write(memoryview(buf)[:n])\n")


def bench_from_json(et: Path, nodes: int, runs: int, tmp: Path) -> None:
    from etkit.format import protojson

    print("== from-json (>= 500,000 nodes/s; floor: reading the twin and writing the .et's bytes, nothing else; "
          f"its node lines in C: {'yes' if protojson.JSONIN is not None else 'no (etkit.format._jsonin not built)'})")
    twin = tmp / "big.json"
    measure(ETKIT + ["to-json", str(et), "-o", str(twin)], tmp)
    r = alternate({"etkit": ETKIT + ["from-json", str(twin), "-o", str(tmp / "back.et")],
                   "parse": [sys.executable, "-c", _PARSE_TWIN, str(twin)],
                   "copy": [sys.executable, "-c", _COPY_TWIN, str(twin), str(et), str(tmp / "copy.et")]}, runs, tmp)
    e, p, c = r["etkit"], r["parse"], r["copy"]
    same = (tmp / "back.et").read_bytes() == et.read_bytes()
    rate = nodes / e.cpu
    print(f"  {twin.name} ({nodes:,} nodes): {e.cpu:.2f} s, {e.peak_mb:.0f} MB, {rate:,.0f} nodes/s "
          f"({verdict(rate >= FROM_JSON_RATE)}); reading and writing alone {c.cpu:.2f} s, from-json/that "
          f"{e.cpu / c.cpu:.1f}; orjson's parse of the lines alone {p.cpu:.2f} s ({nodes / p.cpu:,.0f} nodes/s); "
          f"bytes restored exactly: {same}")
    twin.unlink()
    (tmp / "copy.et").unlink()


def bench_convert(hosts: list[tuple[Path, int]], runs: int, large_runs: int, tmp: Path, large_ref: bool) -> None:
    converter = ref("chakra_converter")
    print("== convert pytorch vs chakra_converter PyTorch (CPU >= 8x, <= 300 MB per 100k nodes; "
          "floor: orjson parse of the same JSON, whole process, with the garbage collector paused as etkit "
          "pauses it, and as it comes)")
    # etkit's modules compiled once, as an installed package has them (PYTHONDONTWRITEBYTECODE would
    # otherwise charge every run the compilation of the modules it imports)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(etkit.__file__).parent)], check=True,
                   stdout=subprocess.DEVNULL)
    parse = [sys.executable, "-c", "import gc, orjson, sys; gc.disable(); orjson.loads(open(sys.argv[1], 'rb').read())"]
    parse_gc = [sys.executable, "-c", "import orjson, sys; orjson.loads(open(sys.argv[1], 'rb').read())"]
    # (OpenBLAS with one thread, as the converter loads it: its pool of threads would cost 0.1-0.2 s here)
    imports = "import os; os.environ['OPENBLAS_NUM_THREADS'] = '1'; import etkit.cli.main, etkit.cli.convert_pytorch, etkit.pytorch.job"
    base = measure([sys.executable, "-c", imports], tmp).peak_mb
    start = alternate({"imports": [sys.executable, "-c", imports]}, runs, tmp)
    print(f"  etkit's start-up alone (interpreter + the converter's imports): {start['imports'].cpu:.2f} s CPU")
    for path, nodes in hosts:
        large = nodes > 100_000
        commands = {"etkit": ETKIT + ["convert", "pytorch", str(path), "-o", str(tmp / "conv"), "-j", "1", "-q"],
                    "parse": parse + [str(path)], "parse_gc": parse_gc + [str(path)]}
        if converter and (large_ref or not large):
            commands["converter"] = converter + ["PyTorch", "--input", str(path), "--output", str(tmp / "ref.et")]
        r = alternate(commands, large_runs if large else runs, tmp)
        e, p, pg = r["etkit"], r["parse"], r["parse_gc"]
        per100k = (e.peak_mb - base) / (nodes / 100_000)  # above the interpreter and imports
        line = (f"  {path.name} ({nodes:,} host nodes): etkit {e.cpu:.2f} s {e.peak_mb:.0f} MB "
                f"({per100k:.0f} MB per 100k nodes above the {base:.0f} MB of imports: "
                f"{verdict(per100k <= CONVERT_MB_PER_100K)}); "
                f"orjson parse {p.cpu:.2f} s ({pg.cpu:.2f} s with the collector on), convert/parse {e.cpu / p.cpu:.1f}")
        if "converter" in r:
            c = r["converter"]
            ratio = c.cpu / e.cpu
            line += f" | chakra_converter {c.cpu:.2f} s {c.peak_mb:.0f} MB | {ratio:.1f}x CPU ({verdict(ratio >= CONVERT_RATIO)})"
        print(line)


def bench_checks(prefix: Path, nodes: int, runs: int, tmp: Path) -> None:
    print("== validate, info, analyze on the real-shaped trace (>= 500,000 nodes/s, info the fastest)")
    commands = {verb: ETKIT + [verb, str(prefix), "-q", "-j", "1"] for verb in ("validate", "info", "analyze")}
    r = alternate(commands, runs, tmp, ok=(0, 1))
    for verb, run in r.items():
        rate = nodes / run.cpu
        print(f"  {verb:9s} {run.cpu:6.2f} s {run.peak_mb:5.0f} MB {rate:12,.0f} nodes/s ({verdict(rate >= CHECK_RATE)})")
    fastest = min(r, key=lambda verb: r[verb].cpu)
    print(f"  fastest: {fastest} ({verdict(fastest == 'info')})")


# What `etkit simulate` does before it simulates: every rank's shape, process groups and communication
# (etkit.simulate._Ranks), in a process set up as the CLI sets up a verb's (etkit.cli.guard.reuse_freed_memory)
_LOADER = ("import sys\nfrom etkit.cli.guard import reuse_freed_memory\nreuse_freed_memory()\n"
           "from etkit.simulate import _Ranks\n_Ranks(sys.argv[1], None)\n")


def bench_job(prefix: Path, nodes: int, runs: int, tmp: Path, label: str, *, targets: bool = True) -> None:
    """``targets=False`` for small jobs, whose figures are start-up: printed, not judged."""
    commands = {verb: ETKIT + [verb, str(prefix), "-q", "-j", "1"] for verb in ("info", "validate")}
    commands["simulate's loading"] = [sys.executable, "-c", _LOADER, str(prefix)]
    r = alternate(commands, runs, tmp, ok=(0, 1))  # validate exits 1 on a job with errors: still measured
    for verb, run in r.items():
        rate = nodes / run.cpu
        judged = (f" ({verdict(rate >= JOB_RATE)}; {run.cpu:.1f} s vs <= {JOB_SECONDS:.0f} s: "
                  f"{verdict(run.cpu <= JOB_SECONDS)})") if targets else ""
        print(f"  {label}: {verb:18s} {run.cpu:6.2f} s {run.peak_mb:5.0f} MB {rate:12,.0f} nodes/s{judged}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per tool on the real inputs (medians)")
    parser.add_argument("--large-runs", type=int, default=1, help="runs per tool on the 1M-node inputs")
    parser.add_argument("--nodes", type=int, default=1_000_000, help="size of the real-shaped inputs")
    parser.add_argument("--skip-large-ref", action="store_true",
                        help="no reference runs on the 1M-node inputs (jsonizer ~3 min, chakra_converter ~5 min each)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, metavar="SECTION",
                        help=f"these sections only ({', '.join(SECTIONS)}); --nodes 0: no real-shaped 1M-node inputs")
    args = parser.parse_args()
    wanted = set(args.only or SECTIONS)
    if not UPSTREAM.is_dir():
        print(f"skipped: {UPSTREAM} not found")
        return 0
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; reference tools: "
          f"{REF_BIN if ref('chakra_jsonizer') else 'missing (make refenv)'}")
    with tempfile.TemporaryDirectory(prefix="etkit-bench-real-") as name:
        tmp = Path(name)
        if "startup" in wanted:
            bench_startup(args.runs, tmp)
        if wanted & {"json", "checks"}:
            _bench_ets(args, tmp, wanted)
        if "convert" in wanted:
            hosts = [(plain, len(orjson.loads(plain.read_bytes())["nodes"]))
                     for plain in (plain_copy(p, tmp) for p in HOST_TRACES)]
            big_host = tmp / "real1m_host.json"
            if args.nodes:
                hosts.append((big_host, repeat_host_trace(hosts[0][0], big_host, args.nodes)))
            bench_convert(hosts, args.runs, args.large_runs, tmp, not args.skip_large_ref)
            big_host.unlink(missing_ok=True)
        if "jobs" in wanted:
            _bench_jobs(args, tmp)
    return 0


#: The sections of the script, in the order they run.
SECTIONS = ("startup", "json", "convert", "checks", "jobs")


def _bench_ets(args: argparse.Namespace, tmp: Path, wanted: set[str]) -> None:
    """to-json / from-json on the upstream vectors and the 1M-node real-shaped ET; validate, info, analyze on it."""
    vectors = [(p, node_count(p)) for p in sorted(UPSTREAM.rglob("*")) if p.name.endswith((".et", ".et.gz"))]
    vectors = [(p, n) for p, n in vectors if n >= 10_000]
    largest = max(vectors, key=lambda v: v[1])[0]
    big = tmp / "real1m.0.et"
    big_nodes = repeat_et(largest, big, args.nodes or 1_000_000)
    if "json" in wanted:
        bench_to_json([*vectors, (big, big_nodes)], args.runs, args.large_runs, tmp, not args.skip_large_ref)
        bench_from_json(big, big_nodes, args.large_runs, tmp)
    if "checks" in wanted:
        bench_checks(tmp / "real1m", big_nodes, args.large_runs, tmp)


def _bench_jobs(args: argparse.Namespace, tmp: Path) -> None:
    """Whole jobs: STAGE's and a generated 1,024-rank Llama-3-70B."""
    print("== whole jobs (info, validate, the simulator's loading: >= 1,000,000 nodes/s, the 1,024-rank job in <= 3 s)")
    for job in sorted(p for p in STAGE.iterdir() if p.is_dir()):
        files = sorted(job.glob("*.et"))
        bench_job(job / "workload", sum(map(node_count, files)), args.runs, tmp, f"STAGE {job.name}", targets=False)
    llama = tmp / "llama" / "l70"
    measure(ETKIT + ["generate", "llm", "--model", "llama3-70b", "--dp", "64", "--tp", "4", "--pp", "4",
                     "-o", str(llama), "-q"], tmp)
    llama_nodes = sum(node_count(p) for p in llama.parent.glob("l70.*.et"))
    bench_job(llama, llama_nodes, args.large_runs, tmp, "Llama-3-70B, 1,024 ranks")


if __name__ == "__main__":
    sys.exit(main())
