"""The main job, end to end on built-in defaults (what ``make demo`` and ``etkit demo`` run).

1. collect a small tensor-parallel transformer job on this machine's CPUs (PyTorch, gloo, 4 ranks);
2. convert every rank to Chakra ET and validate the job across ranks;
3. analyse it (breakdown, communication, critical path, stragglers);
4. simulate it: with a network fitted to its own recorded collectives (checked against the measured
   step time), on a 10x faster network (bandwidth x10, latency /10), and its model family at 1,024 GPUs (``generate llm``) on HGX
   H100 nodes;
5. write an HTML report and Perfetto timelines, and print where everything is.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from .executor import Executor, default_executor
from .fileio import atomic_output
from .records import record

if TYPE_CHECKING:
    from .model.job import Job
    from .simulate import SimulationResult

__all__ = ["DemoResult", "run_demo"]


@record
class DemoResult:
    out_dir: Path
    outputs: dict[str, Path] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)


def _fmt_ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


@record
class _Run:
    """What every step of one demo run shares."""
    out: Path
    workload: str
    ranks: int
    steps: int
    quiet: bool
    executor: Executor
    say: Callable[[str], None]
    result: DemoResult


def run_demo(out_dir: str | os.PathLike[str] = "demo-out", *, workload: str = "tp", ranks: int = 4, steps: int = 2,
             quiet: bool = False, executor: Executor | None = None,
             say: Callable[[str], None] = print) -> DemoResult:
    """Run the whole story into ``out_dir``; ``say`` receives the narration (one line per call)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run = _Run(out, workload, ranks, steps, quiet, executor or default_executor(quiet=quiet), say, DemoResult(out))
    began = time.perf_counter()
    collected = _collect(run)
    prefix = _convert_and_validate(run, collected)
    job = _analyse(run, prefix)
    faster = _simulate(run, job, collected)
    _reports(run, job, faster)
    _summary(run, time.perf_counter() - began)
    return run.result


def _collect(run: _Run) -> Path:
    """Step 1: record the built-in job on this machine's CPUs."""
    from .pytorch.collect import run_example

    run.say(f"[1/6] collect: {run.workload} job, {run.ranks} CPU ranks (gloo), {run.steps} profiled steps")
    collected = run_example(run.workload, run.ranks, run.out / "collected", steps=run.steps, quiet=run.quiet)
    run.result.outputs["collected traces"] = collected
    return collected


def _convert_and_validate(run: _Run, collected: Path) -> Path:
    """Step 2: every rank to Chakra ET, the job validated across ranks; returns the job's prefix."""
    from .pytorch.job import convert_job
    from .validate import validate

    say = run.say
    say("[2/6] convert every rank to Chakra ET and validate the job across ranks")
    prefix = run.out / "et" / "job"
    report = convert_job(collected, prefix, executor=run.executor)
    say(f"      {len(report.ranks)} ranks, {report.nodes:,} nodes -> {prefix}.<rank>.et")
    for rank in report.ranks:
        comm = ", ".join(f"{kind} {count}" for kind, count in sorted(rank.comm_nodes.items())) or "none"
        say(f"      rank {rank.rank}: {rank.nodes:,} nodes; comm {comm} ({rank.comm_bytes:,} bytes); "
            f"{rank.unlinked_ops} ops not linked to Kineto")
    check = validate(prefix, executor=run.executor)
    say(f"      validate: {'OK' if check.ok else 'FAILED'} ({len(check.errors)} errors, {len(check.warnings)} warnings)")
    for finding in check.errors[:10]:
        say(f"        {finding}")
    run.result.outputs["Chakra ETs"] = Path(f"{prefix}.0.et").parent
    return prefix


def _analyse(run: _Run, prefix: Path) -> Job:
    """Step 3: the analyses, written to analysis.txt and narrated; returns the loaded job."""
    from .analyze import analyze_job
    from .analyze.text import render_analysis
    from .model.job import load_job

    run.say("[3/6] analyse")
    job = load_job(prefix, executor=run.executor)
    analysis = analyze_job(job, executor=run.executor)
    with atomic_output(run.out / "analysis.txt", compress=False) as dst:
        dst.write(render_analysis(analysis).encode())
    run.result.outputs["analysis (text)"] = run.out / "analysis.txt"
    run.say("      " + render_analysis(analysis, max_ranks=run.ranks, top=5).replace("\n", "\n      "))
    return job


def _simulate(run: _Run, job: Job, collected: Path) -> SimulationResult:
    """Step 4: the job on a network fitted to its own collectives (against the measured step), on a 10x faster
    network, and its model family at 1,024 GPUs; returns the faster network's simulation."""
    from .generate import llm
    from .model.job import load_job
    from .simulate import Knobs, load_config, simulate
    from .simulate.calibrate import calibrate_from_job, measured_step_ns, write_calibration

    say, steps = run.say, max(run.steps, 1)
    say("[4/6] simulate")
    calibration = calibrate_from_job(job)
    net_path, sys_path = write_calibration(calibration, run.out / "calibrated.network.yml")
    network, system, _ = load_config(net_path, sys_path)
    measured = measured_step_ns(collected) / steps
    here = simulate(job, network, system)
    per_step = here.makespan_ns / steps
    error = (per_step - measured) / measured if measured else float("nan")
    say(f"      this machine (network fitted to the trace): {_fmt_ms(per_step)} per step, measured "
        f"{_fmt_ms(measured)} ({error:+.1%})")
    faster = simulate(job, network, system, Knobs(scale_bandwidth=10.0, scale_latency=0.1))
    say(f"      same job on a 10x faster network (bandwidth x10, latency /10): "
        f"{_fmt_ms(faster.makespan_ns / steps)} per step ({here.makespan_ns / max(faster.makespan_ns, 1):.2f}x faster)")
    big = llm("llama3-8b", dp=32, tp=8, pp=4, layers=8, microbatches=8, device="H100")
    big_prefix = run.out / "llm1024" / "llama3-8b"
    big.write(big_prefix, executor=run.executor)
    big_job = load_job(big_prefix, executor=run.executor)
    h100_net, h100_sys, _ = load_config(preset="hgx-h100")
    at_scale = simulate(big_job, h100_net, h100_sys)
    say(f"      Llama-3 8B (8 layers), dp32 x tp8 x pp4 = 1,024 H100 GPUs on HGX nodes: "
        f"{_fmt_ms(at_scale.makespan_ns)} per step ({at_scale.simulated_nodes:,} nodes walked for "
        f"{at_scale.nodes:,})")
    run.result.figures.update(measured_step_ns=measured, simulated_step_ns=per_step, prediction_error=error,
                              faster_network_step_ns=faster.makespan_ns / steps,
                              llm_1024_step_ns=at_scale.makespan_ns)
    return faster


def _reports(run: _Run, job: Job, faster: SimulationResult) -> None:
    """Step 5: the HTML reports and Perfetto timelines, measured and simulated."""
    from .viz.report import write_report
    from .viz.timeline import write_timeline

    out, outputs = run.out, run.result.outputs
    run.say("[5/6] report and timelines")
    outputs["HTML report"] = write_report(job, out / "report.html",
                                          title=f"etkit demo: {run.workload} x {run.ranks} ranks",
                                          executor=run.executor)
    measured_tl = write_timeline(job, out / "timeline.measured.json")
    simulated_tl = write_timeline(job, out / "timeline.faster-network.json", schedule=faster.schedule)
    outputs["timeline (measured)"] = measured_tl.paths[0]
    outputs["timeline (simulated, 10x network)"] = simulated_tl.paths[0]
    outputs["HTML report (simulated)"] = write_report(job, out / "report.faster-network.html",
                                                      schedule=faster.schedule,
                                                      title="simulated on a 10x faster network",
                                                      executor=run.executor)


def _summary(run: _Run, seconds: float) -> None:
    """Step 6: where everything is."""
    run.say(f"[6/6] done in {seconds:.0f} s; outputs in {run.out}/")
    for name, path in run.result.outputs.items():
        run.say(f"      {name:36s} {path}")
    run.say("      open the .json timelines in https://ui.perfetto.dev (drag and drop); the .html pages need no network")
