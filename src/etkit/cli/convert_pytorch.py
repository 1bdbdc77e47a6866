"""``etkit convert pytorch``: PyTorch host ET (+ Kineto) of every rank -> ``PREFIX.<rank>.et``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import UsageError
from .common import add_quiet, add_workers, executor_from, prefix_arg, text_wanted, write_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "pytorch", help="PyTorch execution traces (+ Kineto) -> Chakra ET per rank",
        description="Convert a PyTorch job to PREFIX.<rank>.et plus PREFIX.comm_groups.json: a directory of host "
                    "and Kineto traces, the files named by --host/--kineto (paths or glob patterns), or a single "
                    "host/linked trace. Host and Kineto traces are told apart, paired and given their rank by their "
                    "contents (pid, distributedInfo, process-group records), whatever their names; the output says "
                    "which file was paired with which. A job whose files come from different runs is refused.")
    parser.add_argument("input", nargs="?", metavar="JOB_DIR|HOST.json",
                        help="job directory, or one host / linked JSON file")
    parser.add_argument("-o", "--output", type=prefix_arg, metavar="PREFIX",
                        help="output prefix (default: the job directory's name, in the current folder)")
    parser.add_argument("--host", action="extend", nargs="+", metavar="H.json", default=None,
                        help="the host traces of the job: paths or glob patterns such as 'dlrm_eg_*.json' (repeatable)")
    parser.add_argument("--kineto", action="extend", nargs="+", metavar="K.json", default=None,
                        help="their Kineto traces: paths or glob patterns such as 'worker*_step_12*.json'; with one "
                             "host file as INPUT, its Kineto trace")
    parser.add_argument("--rank", type=int, default=None,
                        help="rank of a single INPUT file (default: from its contents or name, else 0)")
    parser.add_argument("--gzip", action="store_true", help="write PREFIX.<rank>.et.gz")
    parser.add_argument("--json", "--report", nargs="?", const="-", default=None, metavar="FILE", dest="json",
                        help="write the per-rank report as JSON to FILE; no FILE or '-': to stdout, which then holds "
                             "only the JSON (--report is the old name)")
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)


def _default_prefix(args: argparse.Namespace) -> str:
    if args.input is not None:
        name = Path(args.input.rstrip("/")).name
        for suffix in (".et.json.gz", ".et.json", ".json.gz", ".json"):
            name = name.removesuffix(suffix)
        return name or "job"
    raise UsageError("-o PREFIX is needed with --host")


def run(args: argparse.Namespace) -> int:
    # every check that needs no trace comes first, before the converter (numpy and all) is imported
    output = args.output or _default_prefix(args)
    hosts: list[Path] = []
    kinetos: list[Path] = []
    if args.host is not None:
        if args.input is not None:
            raise UsageError(f"give the job as {args.input} or as --host files, not both")
        if args.rank is not None:
            raise UsageError("--rank applies to a single INPUT file; with --host every rank is read from the traces")
        from ..pytorch.pairing import expand_paths

        hosts, kinetos = expand_paths(args.host, "--host"), expand_paths(args.kineto or [], "--kineto")
    elif args.input is None:
        raise UsageError("give a job directory, a host trace, or --host files")
    elif Path(args.input).is_dir():
        for option, value in (("--kineto", args.kineto), ("--rank", args.rank)):
            if value is not None:
                raise UsageError(f"{option} applies to a single host trace, not to the job directory {args.input} "
                                 "(its host and Kineto traces are paired by their contents)")
    else:
        kineto = args.kineto or []
        if len(kineto) > 1:
            raise UsageError(f"one host trace {args.input} takes one Kineto trace, not {len(kineto)}: "
                             "use --host for a whole job")
        from ..pytorch.jsonio import check_readable
        from ..pytorch.pairing import check_pair

        check_pair(args.input, kineto[0] if kineto else None)  # a wrong or missing file, told before the import
        check_readable(args.input)
    report = _convert(args, output, hosts, kinetos)
    if args.json:
        write_json(report.to_json(), args.json)
    if text_wanted(args):
        print_report(report)
    return 0


def _convert(args: argparse.Namespace, output: str, hosts: list[Path], kinetos: list[Path]):  # noqa: ANN202
    """The conversion itself, once the arguments are checked (``hosts``, ``kinetos``: the --host files)."""
    # The converter does no linear algebra: OpenBLAS's pool of threads (started with numpy) would only cost
    # start-up CPU (0.02-0.03 s of a 0.5 s conversion). A value the user set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from ..pytorch.job import convert_files, convert_job, convert_traces

    if args.host is not None:
        return convert_traces(hosts, kinetos, output, executor=executor_from(args), compress=args.gzip)
    if Path(args.input).is_dir():
        return convert_job(args.input, output, executor=executor_from(args), compress=args.gzip)
    kineto = args.kineto or []
    return convert_files(args.input, output, kineto=kineto[0] if kineto else None, rank=args.rank,
                         compress=args.gzip)


def print_report(report) -> None:  # noqa: ANN001 - a JobReport
    for pair in report.pairs:
        print(f"paired {pair.line()}")
    print(f"{'rank':>4} {'host ops':>8} {'linked':>7} {'unlinked':>8} {'roots':>5} {'ET nodes':>8}  comm nodes")
    for r in report.ranks:
        comm = ", ".join(f"{k} {v}" for k, v in sorted(r.comm_nodes.items())) or "-"
        print(f"{r.rank:>4} {r.host_ops:>8} {r.linked_ops:>7} {r.unlinked_ops:>8} {r.roots:>5} {r.nodes:>8}  {comm}")
        if r.gpu_events or r.runtime_ops:
            print(f"     GPU: {r.gpu_events} kernels/copies/sets/stream syncs ({r.gpu_memory_nodes} copies/sets as MEM nodes), "
                  f"measured {r.gpu_time_kineto_ns / 1e6:.3f} ms in Kineto, {r.gpu_time_et_ns / 1e6:.3f} ms in the ET; "
                  f"{r.runtime_ops} CUDA runtime calls")
        for warning in r.warnings:
            print(f"     warning: {warning}")
    print("host ops = linked (Kineto time known) + unlinked + roots (synthetic, never in Kineto); ET nodes = "
          "host ops - ops folded into their collective's COMM node + GPU kernels, copies and sets + CUDA runtime "
          "calls (+ a METADATA node from Kineto)")
    print(f"wrote {len(report.files)} ET files {report.prefix}.<rank>.et"
          + (f" and {report.comm_groups}" if report.comm_groups else ""))
    if report.removed:
        print(f"removed {len(report.removed)} file(s) of an older job under that prefix: {', '.join(report.removed)}")
