"""etkit simulate against the real ASTRA-sim: parity over drawn cases, and speed, whole process.

  parity: ``--cases`` (default 2,000) drawn cases (``tests/astra/cases.py``, seeded; half of them
          congestion-aware, on one dimension as ASTRA-sim requires), every rank's finish compared:
          per mode the number of cases and ranks, how many agree to the nanosecond, the error's
          maximum, 99th percentile and median, and every case ASTRA-sim itself did not finish.
  speed:  whole-process wall and CPU time (user + system of the child) of ASTRA-sim and of
          ``etkit simulate`` on (a) 16 ranks x 1,000 x (COMP 10 us -> ALL_REDUCE 1 MiB) on
          ASTRA-sim's Ring_16npus.yml / Ring_4chunks.json, (b) a 128-rank LLM job
          (``etkit generate llm --dp 8 --tp 4 --pp 4``, Llama-3 8B, the STAGE-like layout) on a 128-NPU
          Switch, in each mode; medians of ``--runs``; ratio = ASTRA-sim / etkit (above 1: etkit is faster).
          Targets: unaware >= 2.5, aware >= 1.

Run from the repository root: ``.venv/bin/python benchmarks/bench_astra_parity.py [--cases 2000] [--runs 3]
[--workers 2] [--seed 1] [--skip-parity] [--skip-speed]``.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from tests.astra.cases import chain, random_case  # noqa: E402
from tests.astra.harness import ASTRA_SIM, NetworkSpec, compare, run_cases  # noqa: E402

from etkit.format.schema import CommType  # noqa: E402

EXAMPLES = REPO.parent / "shared" / "data" / "upstream" / "astra-sim-astra-sim" / "examples"
ETKIT = REPO / ".venv" / "bin" / "etkit"
TARGETS = {"unaware": 2.5, "aware": 1.0}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def parity(cases: int, seed: int, workers: int) -> bool:
    rng = random.Random(seed)
    drawn = [random_case(rng, i) for i in range(cases)]
    began = time.perf_counter()
    done = 0
    results = []
    for start in range(0, len(drawn), 100):  # progress per hundred
        results += run_cases(drawn[start:start + 100], workers=workers)
        done += len(drawn[start:start + 100])
        print(f"  {done}/{len(drawn)} cases, {time.perf_counter() - began:.0f} s", file=sys.stderr)
    by_mode: dict[str, dict] = {m: {"cases": 0, "ranks": [], "case_max": [], "exact": 0, "errors": []} for m in TARGETS}
    unfinished = collections.Counter()
    kinds = collections.Counter()
    for r in results:
        mode = "aware" if r.case.aware else "unaware"
        if not r.ref.complete(r.case.network.total):
            unfinished[(mode, r.case.tags.get("kind"), r.ref.returncode)] += 1
            continue
        stats = by_mode[mode]
        stats["cases"] += 1
        kinds[(mode, r.case.tags.get("kind"), r.case.tags.get("dims"))] += 1
        if r.error:
            stats["errors"].append(r.describe())
            stats["case_max"].append(float("inf"))
            continue
        rel = compare(r.ref.finish, r.ours).rel
        stats["ranks"] += list(rel.values())
        stats["case_max"].append(max(rel.values()))
        stats["exact"] += all(abs(r.ours[k] - r.ref.finish[k]) < 0.5 for k in r.ref.finish)
    print(f"\nparity over {cases} drawn cases (seed {seed}) in {time.perf_counter() - began:.0f} s")
    print(f"{'mode':>8} {'cases':>6} {'ranks':>7} {'exact cases':>12} {'max error':>10} {'p99 error':>10} {'p50 error':>10}")
    ok = True
    for mode, stats in by_mode.items():
        ranks = stats["ranks"]
        worst = max(stats["case_max"], default=0.0)
        ok &= worst <= 1e-3
        print(f"{mode:>8} {stats['cases']:>6} {len(ranks):>7} {stats['exact']:>12} {worst:>10.4%} "
              f"{percentile(ranks, 0.99):>10.4%} {percentile(ranks, 0.5):>10.4%}")
        for line in stats["errors"][:5]:
            print(f"   etkit error: {line}")
    print("cases by mode, workload and dimensions:",
          ", ".join(f"{m}/{k}/{d}D {n}" for (m, k, d), n in sorted(kinds.items())))
    if unfinished:
        print("ASTRA-sim did not finish (not counted):", dict(unfinished))
    return ok


def _timed(args: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the child process tree, output)."""
    before = os.times()
    began = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, errors="replace")
    wall = time.perf_counter() - began
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, proc.stdout + proc.stderr


def speed(runs: int) -> bool:
    from tests.astra.harness import parse_finish

    from etkit.executor import SerialExecutor
    from etkit.generate.llm import llm

    tmp = Path(tempfile.mkdtemp(prefix="bench-astra-"))
    chain(str(tmp / "chain16"), 16, [(CommType.ALL_REDUCE, 1 << 20)] * 1000, 10)
    llm("llama3-8b", dp=8, tp=4, pp=4).write(str(tmp / "llm128"), executor=SerialExecutor())
    NetworkSpec(("Switch",), (128,), (50.0,), (500.0,)).write(tmp / "switch128.yml")
    system = EXAMPLES / "system" / "native_collectives" / "Ring_4chunks.json"
    jobs = {"(a) 16 x 1,000 chain": (tmp / "chain16", EXAMPLES / "network" / "analytical" / "Ring_16npus.yml", None),
            "(b) 128-rank LLM dp8 tp4 pp4": (tmp / "llm128", tmp / "switch128.yml", tmp / "llm128.comm_groups.json")}
    print(f"\nspeed, whole process, median of {runs} (CPU = user + system)")
    print(f"{'job':>30} {'mode':>8} {'ASTRA-sim wall':>15} {'etkit wall':>11} {'ratio':>6} {'ASTRA-sim CPU':>14} "
          f"{'etkit CPU':>10} {'ratio':>6} {'max error':>10}")
    ok = True
    for label, (prefix, network, groups) in jobs.items():
        for mode in TARGETS:
            astra = [str(ASTRA_SIM), *(["--aware"] if mode == "aware" else []), f"--workload-configuration={prefix}",
                     f"--system-configuration={system}", f"--network-configuration={network}",
                     *([f"--comm-group-configuration={groups}"] if groups else [])]
            ours = [str(ETKIT), "simulate", str(prefix), "--network", str(network), "--system", str(system),
                    "--congestion", mode, "-q", "--json", str(tmp / "out.json"), *(["--comm-groups", str(groups)] if groups else [])]
            a = [_timed(astra) for _ in range(runs)]
            e = [_timed(ours) for _ in range(runs)]
            import json

            mine = {int(r): f["finish_ns"] for r, f in json.loads((tmp / "out.json").read_text())["ranks"].items()}
            ref, _ = parse_finish(a[-1][2])
            err = compare(ref, mine).max_rel
            aw, ac = statistics.median(x[0] for x in a), statistics.median(x[1] for x in a)
            ew, ec = statistics.median(x[0] for x in e), statistics.median(x[1] for x in e)
            ok &= ac / ec >= TARGETS[mode] and err <= 1e-3
            print(f"{label:>30} {mode:>8} {aw:>13.2f} s {ew:>9.2f} s {aw / ew:>6.2f} {ac:>12.2f} s {ec:>8.2f} s "
                  f"{ac / ec:>6.2f} {err:>10.4%}")
    print(f"targets (CPU ratio): unaware >= {TARGETS['unaware']}, aware >= {TARGETS['aware']}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-parity", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    ok = True
    if not args.skip_parity:
        ok &= parity(args.cases, args.seed, args.workers)
    if not args.skip_speed:
        ok &= speed(args.runs)
    print("\nall targets met" if ok else "\nsome target missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
