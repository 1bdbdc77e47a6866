"""The Dask executor on this machine: what a cluster costs over the local pool, and a sweep that reads its job once.

  (a) a 256-rank generated LLM job (llama3-8b dp16 tp4 pp4), ``validate`` and ``analyze``: wall time with
      the in-process executor, the local pool (2 processes) and Dask with 1 and 2 workers (one thread
      each), each client a fresh process; the overhead per task (Dask 1 worker minus in-process, per rank;
      and an empty task's round trip); the client's peak RSS for ``validate`` on Dask at 64, 256 and 1,024
      ranks (it must not grow with the number of ranks: the workers read the files, the client gets
      findings back).
  (b) a 16-point sweep (bandwidth1 x scale-compute, 4 x 4) of a 1,024-rank LLM layout (llama3-70b dp16
      tp8 pp8): time per point before (every point simulated from the files, as a loop over ``etkit
      simulate`` does, and as the old ``--sweep`` did with a loaded job: rank shapes again per point) and
      after (``prepare`` once, then the points), in-process, on the local pool and on Dask with 1 and 2
      workers.

Jobs are generated once into ``$TMPDIR/etkit-bench-dask`` and reused. Figures are medians of ``--runs``
runs. Run from the repository root: ``.venv/bin/python benchmarks/bench_dask.py [--runs 3] [--skip-sweep]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
# the cluster's worker processes and the clients import this checkout too
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])

CACHE = Path(tempfile.gettempdir()) / "etkit-bench-dask"
JOBS = {64: ("llama3-8b", 4, 4, 4), 256: ("llama3-8b", 16, 4, 4), 1024: ("llama3-70b", 16, 8, 8)}

#: One client run in a fresh process: prints {"wall": s, "rss_mb": peak}.
CLIENT = r"""
import json, resource, sys, time
from etkit.executor import executor_from_spec
spec, what, prefix = sys.argv[1:4]
ex = executor_from_spec(spec, workers=2)
began = time.perf_counter()
if getattr(ex, "remote", False):
    ex.client  # connect (and check the workers' directory) before the clock starts
connect = time.perf_counter() - began
began = time.perf_counter()
if what == "validate":
    from etkit.validate import validate
    assert validate(prefix, executor=ex).ok
elif what == "analyze":
    from etkit.analyze import analyze_job
    from etkit.model.job import load_job
    analyze_job(load_job(prefix, executor=ex))
elif what == "info":
    from etkit.analyze.summary import info
    info(prefix, executor=ex)
elif what == "noop":
    ex.map(abs, range(int(prefix)))
wall = time.perf_counter() - began
print(json.dumps({"wall": wall, "connect": connect, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def job(ranks: int) -> Path:
    """The cached generated job of ``ranks`` ranks (written on first use)."""
    model, dp, tp, pp = JOBS[ranks]
    prefix = CACHE / f"{model}-dp{dp}-tp{tp}-pp{pp}" / "job"
    if not (prefix.parent / "done").exists():
        from etkit.executor import SerialExecutor
        from etkit.generate.llm import write_llm

        prefix.parent.mkdir(parents=True, exist_ok=True)
        write_llm(prefix, model=model, dp=dp, tp=tp, pp=pp, executor=SerialExecutor())
        (prefix.parent / "done").write_text("")
    return prefix


def client(spec: str, what: str, arg: str, runs: int) -> tuple[float, float]:
    """Median wall time and the largest peak RSS (MB) of ``runs`` fresh client processes."""
    out = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", CLIENT, spec, what, arg], capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"client {spec} {what} failed: {done.stderr.strip().splitlines()[-1:]}")
        out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return statistics.median(o["wall"] for o in out), max(o["rss_mb"] for o in out)


def cluster(workers: int):
    from distributed import LocalCluster

    return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                        silence_logs=logging.CRITICAL)


def bench_tasks(runs: int) -> None:
    prefix = str(job(256))
    specs = {"in-process": "serial", "local pool (2)": "local:2"}
    rows: dict[str, dict[str, tuple[float, float]]] = {}
    for name, spec in specs.items():
        rows[name] = {w: client(spec, w, prefix, runs) for w in ("validate", "analyze")}
    noop: dict[str, float] = {}
    rss: dict[int, float] = {}
    for n in (1, 2):
        with cluster(n) as c:
            spec = c.scheduler_address
            client(spec, "validate", prefix, 1)  # warm the workers' imports
            rows[f"dask, {n} worker{'s' if n > 1 else ''}"] = {w: client(spec, w, prefix, runs) for w in ("validate", "analyze")}
            noop[f"{n}"] = client(spec, "noop", "256", runs)[0]
            if n == 2:
                rss = {(w, r): client(spec, w, str(job(r)), 1)[1] for w in ("validate", "info") for r in (64, 256, 1024)}
    print("(a) 256-rank llama3-8b dp16 tp4 pp4 (246,144 nodes), wall s (median of %d), client peak RSS MB" % runs)
    print(f"    {'executor':<18} {'validate':>9} {'analyze':>9} {'rss(val)':>9}")
    for name, r in rows.items():
        print(f"    {name:<18} {r['validate'][0]:>9.2f} {r['analyze'][0]:>9.2f} {r['validate'][1]:>9.0f}")
    serial, dask1 = rows["in-process"]["validate"][0], rows["dask, 1 worker"]["validate"][0]
    print(f"    overhead per task: validate on 1 Dask worker vs in-process {(dask1 - serial) / 256 * 1e3:+.1f} ms/rank; "
          f"256 empty tasks (after connecting): {noop['1'] / 256 * 1e3:.2f} ms each on 1 worker, "
          f"{noop['2'] / 256 * 1e3:.2f} ms on 2")
    print("    analyze under Dask reads the traces in the client's pool (the analysis is cross-rank): same work as the pool")
    for what, why in (("validate", "it keeps each rank's compact communication record for the cross-rank rules"),
                      ("info", "one summary row per rank")):
        sizes = ", ".join(f"{r:,} ranks {rss[(what, r)]:.0f} MB" for r in (64, 256, 1024))
        per_rank = (rss[(what, 1024)] - rss[(what, 64)]) * 1024 / 960
        print(f"    client peak RSS, {what} on Dask: {sizes} (+{per_rank:.0f} KB per rank: {why}; "
              f"the 1,024 rank files are {sum(p.stat().st_size for p in job(1024).parent.glob('job.*.et')) / 2**20:.0f} MB)")


def bench_sweep(runs: int) -> None:
    from etkit.executor import SerialExecutor, executor_from_spec
    from etkit.model.job import load_job
    from etkit.simulate import Knobs, load_config, prepare, simulate
    from etkit.simulate.whatif import parse_sweeps, sweep

    prefix = str(job(1024))
    network, system, device = load_config(preset="hgx-h100")
    knobs = Knobs(trace_device=device)
    axes = parse_sweeps(["bandwidth1=25,50,100,200", "scale-compute=1,0.75,0.5,0.25"])
    serial = SerialExecutor()

    def timed(fn) -> float:
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            fn()
            times.append(time.perf_counter() - began)
        return statistics.median(times)

    from_files = timed(lambda: simulate(prefix, network, system, knobs))
    loaded = load_job(prefix, executor=serial)
    from_job = timed(lambda: simulate(loaded, network, system, knobs))  # noqa: F821 (called before the del)
    del loaded
    prep = timed(lambda: prepare(prefix, executor=serial))
    prepared = prepare(prefix, executor=serial)
    points = timed(lambda: sweep(prepared, network, system, knobs, axes))  # 16 points + the baseline
    print("(b) 16-point sweep (bandwidth1 x scale-compute) of the 1,024-rank llama3-70b dp16 tp8 pp8 "
          f"(1,225,984 nodes), median of {runs}")
    print(f"    before: {from_files:.2f} s per point simulated from the files; {from_job:.2f} s per point on a loaded "
          "job (the old --sweep: shapes again per point, after a load)")
    print(f"    after: prepare once {prep:.2f} s, then {points / 17:.3f} s per point (17 runs: 16 points + baseline): "
          f"{from_files / (points / 17):,.0f}x faster per point than from the files")
    whole = {"in-process": prep + points}
    whole["local pool (2)"] = timed(lambda: sweep(prefix, network, system, knobs, axes, executor=executor_from_spec("local:2")))
    for n in (1, 2):
        with cluster(n) as c:
            ex = executor_from_spec(c.scheduler_address)
            sweep(str(job(64)), network, system, knobs, parse_sweeps(["latency=1,2"]), executor=ex)  # warm imports
            name = f"dask, {n} worker{'s' if n > 1 else ''}"
            began = time.perf_counter()
            sweep(prefix, network, system, knobs, axes, executor=ex)
            whole[name] = time.perf_counter() - began
            whole[name + " again (workers hold the job)"] = timed(lambda: sweep(prefix, network, system, knobs, axes, executor=ex))
            ex.close()
    print("    whole sweep (read + 17 runs), wall s: " + "; ".join(f"{k} {v:.2f}" for k, v in whole.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--skip-tasks", action="store_true")
    args = parser.parse_args()
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise SystemExit("bench_dask: needs the dask extra (pip install 'etkit[dask]')") from None
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if not args.skip_tasks:
        bench_tasks(args.runs)
    if not args.skip_sweep:
        bench_sweep(args.runs)


if __name__ == "__main__":
    main()
