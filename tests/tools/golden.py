"""Behaviour-preservation snapshots: run every verb on the shared and generated jobs and keep what they wrote.

``python tests/tools/golden.py OUT [--src TREE/src] [--only WORD ...]`` runs each command below as
``python -m etkit ...`` with ``PYTHONPATH=TREE/src`` (the tree under test, default this checkout's),
in the working folder ``OUT/work``, and writes into ``OUT/golden``:

- ``NN-name.txt``: the command line, its exit status, and its stdout and stderr with wall-clock
  figures masked (elapsed seconds, rates per second, the run's own folders);
- every file the command wrote (copied as they are; binary files compared byte for byte).

Compare two trees (a commit and its parent) with ``diff -r A/golden B/golden`` (or ``--compare A B``, which
prints the files that differ and the first lines that do). Both runs must use the same ``OUT`` path
(run one tree, move OUT aside, run the other), so the paths printed by the verbs are equal.

Commands whose outputs are measured rather than computed (replay: the time PyTorch took) keep only
the shape of their output: every number masked. This is a tool for refactors, not a test: it takes
a few minutes of CPU.
"""
from __future__ import annotations

import argparse
import difflib
import filecmp
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = (ROOT / ".." / "shared" / "data").resolve()
PT = SHARED / "pytorch"
UP = SHARED / "upstream"
MICRO = UP / "astra-sim-astra-sim/examples/workload/microbenchmarks"
TEXT = UP / "mlcommons-chakra/eg_converter/input_files/Text"


@dataclass(frozen=True)
class Cmd:
    name: str
    argv: tuple[str, ...]
    outputs: tuple[str, ...] = ()  # files or folders (relative to work/) the command writes
    numbers: bool = False  # mask every number (measured, not computed, outputs)


def _c(name: str, *argv: str, out: tuple[str, ...] = (), numbers: bool = False) -> Cmd:
    return Cmd(name, tuple(str(a) for a in argv), out, numbers)


# jobs converted from the shared data and generated here: prefix -> how it is made
PYTORCH_JOBS = ("ddp_mlp_ws2", "tp_transformer_ws2", "tp_transformer_ws4", "hybrid_dp_tp_ws4", "pp_sendrecv_ws2",
                "all_to_all_ws2", "fsdp2_mlp_ws2", "cnn_single")


def commands() -> list[Cmd]:
    cmds: list[Cmd] = []
    jobs: list[str] = []
    # --- producers
    for name in PYTORCH_JOBS:
        cmds.append(_c(f"convert-pytorch-{name}", "convert", "pytorch", PT / name, "-o", f"et/{name}", "-q",
                       out=(f"et/{name}",)))
        jobs.append(f"et/{name}")
    cmds.append(_c("convert-kineto-tp2", "convert", "kineto", PT / "tp_transformer_ws2", "-o", "et/tp2k", "-q",
                   out=("et/tp2k",)))
    jobs.append("et/tp2k")
    cmds.append(_c("link-tp2", "link", "--host", PT / "tp_transformer_ws2/rank-0.et.json",
                   "--kineto", PT / "tp_transformer_ws2/rank-0.kineto.json", "-o", "linked/tp0.json", "-q",
                   out=("linked",)))
    cmds.append(_c("convert-text-resnet", "convert", "text", TEXT / "Resnet50_DataParallel.txt", "-o", "et/resnet",
                   "--npus", "4", "--passes", "1", "-q", out=("et/resnet",)))
    cmds.append(_c("convert-text-transformer", "convert", "text", TEXT / "Transformer_HybridParallel.txt",
                   "-o", "et/tr", "--npus", "8", "--passes", "1", "-q", out=("et/tr",)))
    jobs += ["et/resnet", "et/tr"]
    cmds.append(_c("gen-micro", "generate", "micro", "--npus", "4", "-o", "gen/micro", "-q", out=("gen/micro",)))
    cmds.append(_c("gen-collective", "generate", "collective", "--type", "all_reduce", "--size", "1MiB", "--npus", "8",
                   "--groups", "0-3", "4-7", "-o", "gen/ar", "-q", out=("gen/ar",)))
    cmds.append(_c("gen-llm", "generate", "llm", "--model", "llama3-8b", "--layers", "2", "--seq-len", "1024",
                   "--micro-batches", "4", "--dp", "2", "--tp", "2", "--pp", "2", "-o", "gen/llm", "-q",
                   out=("gen/llm",)))
    cmds.append(_c("gen-moe", "generate", "llm", "--model", "mixtral-8x7b", "--layers", "2", "--dp", "2", "--ep", "2",
                   "--tp", "2", "--pp", "1", "--sp", "--zero", "1", "-o", "gen/moe", "-q", out=("gen/moe",)))
    cmds.append(_c("gen-dlrm", "generate", "dlrm", "--npus", "4", "--batch", "256", "-o", "gen/dlrm", "-q",
                   out=("gen/dlrm",)))
    cmds.append(_c("gen-serve", "generate", "llm-serve", "--serving-preset", "llama3-70b-h100", "--disaggregated",
                   "8:8", "--rate", "2", "--duration", "2", "-o", "gen/serve", "-q", out=("gen/serve",)))
    jobs += ["gen/ar", "gen/llm", "gen/moe", "gen/dlrm", "gen/micro/ALL_REDUCE", "gen/micro/two_comp_nodes_dependent"]
    # --- consumers, on every job
    shared_micro = str(MICRO / "all_reduce/8npus_1MB/all_reduce")
    for job in jobs + [shared_micro]:
        tag = job.replace("/", "_").split("microbenchmarks_")[-1]
        cmds.append(_c(f"info-{tag}", "info", job, "--json", "-", "-q"))
        cmds.append(_c(f"validate-{tag}", "validate", job, "--json", "-", "-q"))
        cmds.append(_c(f"simulate-{tag}", "simulate", job, "--preset", "hgx-h100", "--json", f"sim/{tag}.json",
                       "--timeline", f"sim/{tag}.trace.json", "-q", out=(f"sim/{tag}.json", f"sim/{tag}.trace.json")))
        cmds.append(_c(f"analyze-{tag}", "analyze", job, "--json", "-", "-q"))
        cmds.append(_c(f"timeline-{tag}", "timeline", job, "-o", f"tl/{tag}.json", "-q", out=(f"tl/{tag}.json",)))
        cmds.append(_c(f"export-{tag}", "export", "astra-sim", job, "-o", f"astra/{tag}/job", "--preset", "hgx-h100",
                       "-q", out=(f"astra/{tag}",)))
    for job in ("et/tp_transformer_ws2", "gen/llm", "et/resnet"):
        tag = job.replace("/", "_")
        cmds.append(_c(f"report-{tag}", "report", job, "-o", f"rep/{tag}.html", "-q", out=(f"rep/{tag}.html",)))
        cmds.append(_c(f"graph-{tag}", "graph", f"{job}.0.et", "-o", f"graph/{tag}.dot", "-q",
                       out=(f"graph/{tag}.dot",)))
        cmds.append(_c(f"graph-svg-{tag}", "graph", f"{job}.0.et", "-o", f"graph/{tag}.graphml", "-q",
                       out=(f"graph/{tag}.graphml",)))
        cmds.append(_c(f"to-json-{tag}", "to-json", f"{job}.0.et", "-o", f"json/{tag}.0.json", "-q",
                       out=(f"json/{tag}.0.json",)))
        cmds.append(_c(f"to-jsonizer-{tag}", "to-json", f"{job}.0.et", "--format", "jsonizer",
                       "-o", f"json/{tag}.0.txt", "-q", out=(f"json/{tag}.0.txt",)))
        cmds.append(_c(f"from-json-{tag}", "from-json", f"json/{tag}.0.json", "-o", f"back/{tag}.0.et", "-q",
                       out=(f"back/{tag}.0.et",)))
        cmds.append(_c(f"anonymize-{tag}", "anonymize", job, "-o", f"anon/{tag}", "-q", out=(f"anon/{tag}",)))
    cmds.append(_c("simulate-llm-whatif", "simulate", "gen/llm", "--preset", "hgx-h100", "--straggler", "3:1.3",
                   "--device", "H200", "-q"))
    cmds.append(_c("simulate-llm-sweep", "simulate", "gen/llm", "--preset", "hgx-h100", "--sweep",
                   "bandwidth1=50,200", "-q", "-j", "1"))
    cmds.append(_c("simulate-serve", "simulate", "gen/serve", "--preset", "hgx-h100", "--slo-ttft", "500",
                   "--slo-tpot", "25", "-q"))
    cmds.append(_c("simulate-aware", "simulate", "gen/ar", "--preset", "hgx-h100", "--congestion", "aware", "-q"))
    cmds.append(_c("diff-tp", "diff", "et/tp_transformer_ws2", "et/tp_transformer_ws4", "-q", "--top", "6"))
    cmds.append(_c("report-baseline", "report", "et/tp_transformer_ws4", "--baseline", "et/tp_transformer_ws2",
                   "-o", "rep/tp4-vs-tp2.html", "-q", out=("rep/tp4-vs-tp2.html",)))
    cmds.append(_c("scale-ddp", "scale", "et/ddp_mlp_ws2", "--dp", "4", "-o", "scaled/ddp4", "-q",
                   out=("scaled/ddp4",)))
    cmds.append(_c("scale-llm-tp", "scale", "gen/llm", "--tp", "4", "-o", "scaled/llm-tp4", "-q",
                   out=("scaled/llm-tp4",)))
    cmds.append(_c("calibrate-ddp", "calibrate", "--from-trace", "et/ddp_mlp_ws2", "-o", "cal/ddp.yml",
                   out=("cal",)))
    cmds.append(_c("replay-micro", "replay", "gen/micro/two_comp_nodes_dependent", "--iters", "2", "--json", "-",
                   "-q", numbers=True))
    cmds.append(_c("replay-ar", "replay", str(MICRO / "all_reduce/4npus_1MB/all_reduce"), "--ranks", "4",
                   "--mode", "comm", "--iters", "1", "-q", numbers=True))
    return cmds


# wall-clock figures: (pattern, replacement)
_WALL = [
    (re.compile(r"(\b(in|took|elapsed|wall|after)\s+)\d+(\.\d+)?\s*(ms|s|µs|us|min)\b"), r"\1<T>"),
    (re.compile(r"\b\d[\d,]*(\.\d+)?\s*[kMG]?(nodes|records|ranks|B|MB|GB|files)/s\b"), "<RATE>"),
    (re.compile(r'("(wall|elapsed|seconds|wall_s|elapsed_s|cpu_s)"\s*:\s*)[0-9.eE+-]+'), r"\1<T>"),
]
_NUMBER = re.compile(r"\d+(\.\d+)?([eE][+-]?\d+)?")


def mask(text: str, *, out: Path, src: Path, numbers: bool) -> str:
    text = text.replace(str(out), "<OUT>").replace(str(src), "<SRC>")
    text = re.sub(r"/tmp/[^\s'\"]*?(etkit|tmp)[\w.-]*", "<TMP>", text)
    for pattern, repl in _WALL:
        text = pattern.sub(repl, text)
    if numbers:
        text = _NUMBER.sub("<N>", text)
    return text


def run_all(out: Path, src: Path, only: list[str], timeout: float) -> int:
    work, golden = out / "work", out / "golden"
    for d in (work, golden):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(src), ETKIT_EXECUTOR="serial", PYTHONHASHSEED="0", COLUMNS="100",
               TERM="dumb", NO_COLOR="1")
    env.pop("ETKIT_MAX_BYTES", None)
    failures = 0
    for i, cmd in enumerate(commands()):
        if only and not any(w in cmd.name for w in only):
            continue
        for o in cmd.outputs:
            (work / o).parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "etkit", *cmd.argv], cwd=work, env=env, capture_output=True,
                                  text=True, timeout=timeout, errors="replace")
            rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired:
            rc, stdout, stderr = "timeout", "", ""
        dt = time.perf_counter() - t0
        print(f"{i:03d} {cmd.name:40s} rc={rc} {dt:6.1f}s", flush=True)
        failures += rc not in (0, 1)
        body = "\n".join([" ".join(cmd.argv), f"rc={rc}", "--- stdout", mask(stdout, out=out, src=src, numbers=cmd.numbers),
                          "--- stderr", mask(stderr, out=out, src=src, numbers=cmd.numbers)])
        (golden / f"{i:03d}-{cmd.name}.txt").write_text(body)
        for o in cmd.outputs:
            _keep(work, work / o, golden / "files", out, src, cmd.numbers)
    return failures


def _keep(work: Path, path: Path, dest: Path, out: Path, src: Path, numbers: bool) -> None:
    paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
    if not path.exists():  # a prefix: its rank files and groups
        paths = sorted(p for p in path.parent.glob(path.name + ".*") if p.is_file())
    for p in paths:
        target = dest / p.relative_to(work)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = p.read_bytes()
        if p.suffix in (".json", ".yml", ".yaml", ".txt", ".html", ".dot", ".graphml", ".svg") and b"\0" not in data:
            text = mask(data.decode("utf-8", "replace"), out=out, src=src, numbers=numbers)
            target.write_text(text)
        else:
            target.write_bytes(data)


def compare(a: Path, b: Path) -> int:
    ga, gb = a / "golden", b / "golden"
    differ = 0

    def walk(cmp: filecmp.dircmp, rel: Path) -> None:
        nonlocal differ
        for name in cmp.left_only + cmp.right_only:
            differ += 1
            print(f"only in one: {rel / name}")
        for name in cmp.diff_files:
            differ += 1
            print(f"differs: {rel / name}")
            pa, pb = Path(cmp.left) / name, Path(cmp.right) / name
            try:
                la, lb = pa.read_text().splitlines(), pb.read_text().splitlines()
                for line in list(difflib.unified_diff(la, lb, lineterm="", n=0))[2:12]:
                    print("    " + line[:200])
            except UnicodeDecodeError:
                print("    (binary)")
        for name, sub in cmp.subdirs.items():
            walk(sub, rel / name)

    walk(filecmp.dircmp(ga, gb, ignore=[]), Path("."))
    print(f"{differ} difference(s)" if differ else "identical")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, nargs="?", help="output folder (OUT/work, OUT/golden)")
    p.add_argument("--src", type=Path, default=ROOT / "src", help="the tree's src/ to run (default: this checkout's)")
    p.add_argument("--only", nargs="*", default=[], metavar="WORD", help="only commands whose name contains a WORD "
                   "(producers the consumers need must be selected too)")
    p.add_argument("--timeout", type=float, default=300, help="seconds per command (default 300)")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two finished runs")
    p.add_argument("--list", action="store_true", help="list the commands")
    args = p.parse_args(argv)
    if args.list:
        for cmd in commands():
            print(f"{cmd.name:40s} etkit {' '.join(cmd.argv)}")
        return 0
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        p.error("OUT is required")
    return 1 if run_all(args.out.resolve(), args.src.resolve(), args.only, args.timeout) else 0


if __name__ == "__main__":
    sys.exit(main())
