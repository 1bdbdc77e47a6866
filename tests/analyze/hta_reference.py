"""Run HTA (Holistic Trace Analysis 0.5.0, the reference environment .venv-ref) on a folder of Kineto traces
and print its figures as JSON: the oracle etkit's GPU analyses are compared with (tests/analyze/test_hta.py,
benchmarks/bench_hta.py). Run with the reference interpreter; it never imports etkit.

    .venv-ref/bin/python tests/analyze/hta_reference.py TRACE_DIR [TRACE_DIR ...] [--operator NAME] > hta.json

With several folders, one process (one HTA import) analyses each and prints ``{folder: figures}``.

HTA's default rounding of event bounds to whole microseconds is turned off (HTA_DISABLE_NS_ROUNDING=1) so
its figures keep the traces' nanoseconds; HTA reports microseconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time

os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")


def _records(df) -> list[dict]:  # type: ignore[no-untyped-def]
    return json.loads(df.to_json(orient="records"))


def analyse(trace_dir: str, operator: str | None, include_last_step: bool) -> dict:
    """HTA's figures of one folder of traces (a function that fails is recorded in ``errors``)."""
    from hta.trace_analysis import TraceAnalysis

    t1 = time.perf_counter()
    a = TraceAnalysis(trace_dir=trace_dir, include_last_profiler_step=include_last_step)
    t2 = time.perf_counter()
    ranks = a.t.get_ranks()
    out: dict = {"ranks": ranks, "errors": {}}

    def run(name, fn):  # type: ignore[no-untyped-def]
        try:
            out[name] = fn()
        except Exception as exc:  # an HTA function that fails on this trace: recorded, the others still run
            out["errors"][name] = f"{type(exc).__name__}: {exc}"

    run("temporal", lambda: _records(a.get_temporal_breakdown(visualize=False)))

    def kernels():  # type: ignore[no-untyped-def]
        types, table = a.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=10**9,
                                                  include_memory_kernels=True)
        out["kernel_types"] = _records(types)
        return _records(table)

    run("kernels", kernels)
    run("overlap", lambda: _records(a.get_comm_comp_overlap(visualize=False)))
    run("idle", lambda: _records(a.get_idle_time_breakdown(ranks=ranks, visualize=False)[0]))
    run("launches", lambda: {str(r): _records(df) for r, df in
                             a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False).items()})

    def annotations():  # type: ignore[no-untyped-def]
        df = a.get_gpu_user_annotation_breakdown(use_gpu_annotation=False, visualize=False, num_kernels=10**9,
                                                 duration_ratio=1.0)
        return _records(df) if df is not None else []

    run("annotations", annotations)
    if operator:
        def sequences():  # type: ignore[no-untyped-def]
            with tempfile.TemporaryDirectory() as tmp:
                return _records(a.get_frequent_cuda_kernel_sequences(operator, tmp, rank=ranks[0], top_k=10**9,
                                                                     visualize=False))
        run("sequences", sequences)
    out["seconds"] = {"load": t2 - t1, "analyses": time.perf_counter() - t2}
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("trace_dirs", nargs="+")
    p.add_argument("--operator", default=None, help="operator of get_frequent_cuda_kernel_sequences")
    p.add_argument("--include-last-step", action="store_true")
    args = p.parse_args()
    logging.disable(logging.CRITICAL)
    t0 = time.perf_counter()
    import hta.trace_analysis  # noqa: F401  (the import is timed apart)

    imported = time.perf_counter() - t0
    found = {d: analyse(d, args.operator, args.include_last_step) for d in args.trace_dirs}
    json.dump(found[args.trace_dirs[0]] | {"import_s": imported} if len(found) == 1 else
              {"import_s": imported, "traces": found}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
