"""``etkit export astra-sim``: time and peak memory per rank, and the same job through ASTRA-sim after.

Each case is exported in a fresh child process (through a local pool of ``--workers`` processes, so a
worker holds one rank at a time), several times; the script prints the median wall time, nodes per
second, the largest worker's peak RSS against the largest rank file (bounded memory: it follows the
largest rank, not the job), and, when the shared ASTRA-sim is there, its run on the export.

    .venv/bin/python benchmarks/bench_export.py [--repeat 3] [--workers 2]

Cases: a generated Llama-3 8B step on 128 ranks (dp4 x tp8 x pp4: many small ranks, few rows
rewritten); two 200,000-node ranks of real shape (the shared tp_transformer_ws2 conversion repeated by
``benchmarks/real_shapes.py``: a measured trace, every record re-encoded as etkit replays it). The copies
of the repeated job are independent graphs that run at once, so its ranks issue their collectives in
different orders (``etkit simulate`` warns, ASTRA-sim waits forever): it is timed, not run on ASTRA-sim.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ASTRA_SIM = REPO.parent / "shared" / "tools" / "astra-sim" / "astra-sim"
PYTORCH = REPO.parent / "shared" / "data" / "pytorch"

_CHILD = """
import json, sys, time
from etkit.executor import ProcessExecutor, SerialExecutor
from etkit.export import astra_sim
src, out, workers, net = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
start = time.perf_counter()
done = astra_sim(src, out, network=net or None, executor=SerialExecutor() if workers == 1 else ProcessExecutor(workers))
print(json.dumps({"seconds": time.perf_counter() - start, "nodes": done.nodes_in, "command": done.command}))
"""


def _llm(folder: Path) -> tuple[str, Path, bool]:
    from etkit.executor import SerialExecutor
    from etkit.generate.llm import write_llm

    write_llm(folder / "llm", model="llama3-8b", dp=4, tp=8, pp=4, microbatches=8, executor=SerialExecutor())
    return "llama3-8b dp4 tp8 pp4 = 128 ranks (generated)", folder / "llm", True


def _real_shape(folder: Path) -> tuple[str, Path, bool] | None:
    if not (PYTORCH / "tp_transformer_ws2").is_dir():
        return None
    from etkit.executor import SerialExecutor
    from etkit.pytorch.job import convert_job

    convert_job(PYTORCH / "tp_transformer_ws2", folder / "tp", executor=SerialExecutor())
    for rank in (0, 1):
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "real_shapes.py"), "et", str(folder / f"tp.{rank}.et"),
                        str(folder / f"big.{rank}.et"), "--nodes", "200000"], check=True, capture_output=True)
    (folder / "big.comm_groups.json").write_bytes((folder / "tp.comm_groups.json").read_bytes())
    return "tp_transformer_ws2 repeated to 2 x 200,000 nodes (measured)", folder / "big", False


def _network(folder: Path, ranks: int) -> Path:
    path = folder / f"ring{ranks}.yml"
    path.write_text(f"topology: [ Ring ]\nnpus_count: [ {ranks} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    return path


def run_once(src: Path, out: Path, workers: int, network: Path) -> dict:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(src), str(out), str(workers), str(network)],
                            stdout=subprocess.PIPE)
    stdout = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit("benchmark child failed")
    result = json.loads(stdout)
    result["peak_mb"] = usage.ru_maxrss / 1024  # the largest of the child and its workers
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="etkit-bench-export-") as tmp:
        folder = Path(tmp)
        cases = [c for c in (_llm(folder), _real_shape(folder)) if c is not None]
        print(f"{'case':64} {'median s':>9} {'nodes/s':>10} {'peak MB':>8} {'largest rank MB':>16}  ASTRA-sim")
        for label, src, one_job in cases:
            files = sorted(src.parent.glob(f"{src.name}.*.et"))
            network = _network(folder, len(files))
            runs = [run_once(src, folder / "out", args.workers, network) for _ in range(args.repeat)]
            seconds = statistics.median(r["seconds"] for r in runs)
            largest = max(f.stat().st_size for f in files) / 2**20
            astra = "-"
            if ASTRA_SIM.exists() and one_job:
                cmd = runs[0]["command"].split()[1:]
                proc = subprocess.run([str(ASTRA_SIM), *cmd], capture_output=True, text=True)
                finished = re.findall(r"sys\[\d+\] finished", proc.stdout)
                astra = f"{len(finished)}/{len(files)} ranks finished"
            print(f"{label:64} {seconds:9.2f} {runs[0]['nodes'] / seconds:10,.0f} "
                  f"{max(r['peak_mb'] for r in runs):8.0f} {largest:16.1f}  {astra}")


if __name__ == "__main__":
    main()
