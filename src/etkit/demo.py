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
from dataclasses import dataclass, field
from pathlib import Path

from .executor import Executor, default_executor
from .fileio import atomic_output

__all__ = ["DemoResult", "run_demo"]


@dataclass
class DemoResult:
    out_dir: Path
    outputs: dict[str, Path] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)


def _fmt_ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def run_demo(out_dir: str | os.PathLike[str] = "demo-out", *, workload: str = "tp", ranks: int = 4, steps: int = 2,
             quiet: bool = False, executor: Executor | None = None,
             say: Callable[[str], None] = print) -> DemoResult:
    """Run the whole story into ``out_dir``; ``say`` receives the narration (one line per call)."""
    from .analyze import analyze_job
    from .analyze.text import render_analysis
    from .generate import llm
    from .model.job import load_job
    from .pytorch.collect import run_example
    from .pytorch.job import convert_job
    from .simulate import Knobs, load_config, simulate
    from .simulate.calibrate import calibrate_from_job, measured_step_ns, write_calibration
    from .validate import validate
    from .viz.report import write_report
    from .viz.timeline import write_timeline

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    executor = executor or default_executor(quiet=quiet)
    result = DemoResult(out)
    began = time.perf_counter()

    say(f"[1/6] collect: {workload} job, {ranks} CPU ranks (gloo), {steps} profiled steps")
    collected = run_example(workload, ranks, out / "collected", steps=steps, quiet=quiet)
    result.outputs["collected traces"] = collected

    say("[2/6] convert every rank to Chakra ET and validate the job across ranks")
    prefix = out / "et" / "job"
    report = convert_job(collected, prefix, executor=executor)
    say(f"      {len(report.ranks)} ranks, {report.nodes:,} nodes -> {prefix}.<rank>.et")
    for rank in report.ranks:
        comm = ", ".join(f"{kind} {count}" for kind, count in sorted(rank.comm_nodes.items())) or "none"
        say(f"      rank {rank.rank}: {rank.nodes:,} nodes; comm {comm} ({rank.comm_bytes:,} bytes); "
            f"{rank.unlinked_ops} ops not linked to Kineto")
    check = validate(prefix, executor=executor)
    say(f"      validate: {'OK' if check.ok else 'FAILED'} ({len(check.errors)} errors, {len(check.warnings)} warnings)")
    for finding in check.errors[:10]:
        say(f"        {finding}")
    result.outputs["Chakra ETs"] = Path(f"{prefix}.0.et").parent

    say("[3/6] analyse")
    job = load_job(prefix, executor=executor)
    analysis = analyze_job(job, executor=executor)
    with atomic_output(out / "analysis.txt", compress=False) as dst:
        dst.write(render_analysis(analysis).encode())
    result.outputs["analysis (text)"] = out / "analysis.txt"
    say("      " + render_analysis(analysis, max_ranks=ranks, top=5).replace("\n", "\n      "))

    say("[4/6] simulate")
    calibration = calibrate_from_job(job)
    net_path, sys_path = write_calibration(calibration, out / "calibrated.network.yml")
    network, system, _ = load_config(net_path, sys_path)
    measured = measured_step_ns(collected) / max(steps, 1)
    here = simulate(job, network, system)
    per_step = here.makespan_ns / max(steps, 1)
    error = (per_step - measured) / measured if measured else float("nan")
    say(f"      this machine (network fitted to the trace): {_fmt_ms(per_step)} per step, measured "
        f"{_fmt_ms(measured)} ({error:+.1%})")
    faster = simulate(job, network, system, Knobs(scale_bandwidth=10.0, scale_latency=0.1))
    say(f"      same job on a 10x faster network (bandwidth x10, latency /10): "
        f"{_fmt_ms(faster.makespan_ns / max(steps, 1))} per step ({here.makespan_ns / max(faster.makespan_ns, 1):.2f}x faster)")
    big = llm("llama3-8b", dp=32, tp=8, pp=4, layers=8, microbatches=8, device="H100")
    big_prefix = out / "llm1024" / "llama3-8b"
    big.write(big_prefix, executor=executor)
    big_job = load_job(big_prefix, executor=executor)
    h100_net, h100_sys, _ = load_config(preset="hgx-h100")
    at_scale = simulate(big_job, h100_net, h100_sys)
    say(f"      Llama-3 8B (8 layers), dp32 x tp8 x pp4 = 1,024 H100 GPUs on HGX nodes: "
        f"{_fmt_ms(at_scale.makespan_ns)} per step ({at_scale.simulated_nodes:,} nodes walked for "
        f"{at_scale.nodes:,})")
    result.figures.update(measured_step_ns=measured, simulated_step_ns=per_step, prediction_error=error,
                          faster_network_step_ns=faster.makespan_ns / max(steps, 1),
                          llm_1024_step_ns=at_scale.makespan_ns)

    say("[5/6] report and timelines")
    html = write_report(job, out / "report.html", title=f"etkit demo: {workload} x {ranks} ranks", executor=executor)
    result.outputs["HTML report"] = html
    measured_tl = write_timeline(job, out / "timeline.measured.json")
    simulated_tl = write_timeline(job, out / "timeline.faster-network.json", schedule=faster.schedule)
    result.outputs["timeline (measured)"] = measured_tl.paths[0]
    result.outputs["timeline (simulated, 10x network)"] = simulated_tl.paths[0]
    html_sim = write_report(job, out / "report.faster-network.html", schedule=faster.schedule,
                            title="simulated on a 10x faster network", executor=executor)
    result.outputs["HTML report (simulated)"] = html_sim

    say(f"[6/6] done in {time.perf_counter() - began:.0f} s; outputs in {out}/")
    for name, path in result.outputs.items():
        say(f"      {name:36s} {path}")
    say("      open the .json timelines in https://ui.perfetto.dev (drag and drop); the .html pages need no network")
    return result
