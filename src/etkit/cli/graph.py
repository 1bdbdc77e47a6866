"""``etkit graph FILE.et -o OUT.{dot,svg,png,pdf,graphml}``: draw part of one rank's dependency graph.

Select with ``--around ID --depth K`` (nodes within K dependency hops of node ID) and ``--filter``
(repeatable, all must hold): ``type=COMP,COMM_COLL``, ``kind=comm``, ``name~REGEX``, ``dur>=US``,
``dur<=US``. Nodes a filter drops are bridged by dashed edges. The critical path is drawn red.
svg/png/pdf use Graphviz ``dot`` when installed, else a built-in layered layout (matplotlib).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from .common import add_quiet, default_output, non_negative_int, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("graph", help="draw a sub-graph of one rank's ET (dot, svg, png, pdf, graphml)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE.et", help="one rank's ET file")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="OUT.dot, OUT.svg, OUT.png, OUT.pdf or OUT.graphml (default: the file's name + .svg, "
                        "in the current folder)")
    p.add_argument("--around", type=non_negative_int, metavar="ID", help="centre the drawing on this node id")
    p.add_argument("--depth", type=non_negative_int, default=2, metavar="K", help="dependency hops around --around (default 2)")
    p.add_argument("--filter", action="append", default=[], metavar="EXPR", help="keep matching nodes (repeatable)")
    p.add_argument("--max-nodes", type=positive_int, default=400, metavar="N", help="refuse to draw more (default 400)")
    p.add_argument("--no-critical-path", action="store_true", help="skip computing the critical path")
    add_quiet(p)
    p.set_defaults(func=run, option_flags={"filters": "--filter"})  # the library's names of the flags that differ


def run(args: argparse.Namespace) -> int:
    from ..analyze import critical_path
    from ..executor import SerialExecutor
    from ..model.job import load_job
    from ..viz.graph import FORMATS, write_graph

    output = args.output or default_output(args.file, ".svg")
    fmt = Path(output).suffix.lstrip(".").lower()
    if fmt not in FORMATS:  # before the file is read
        raise UsageError(f"{output}: unknown graph format {fmt!r} (use {', '.join(FORMATS)})")
    job = load_job([args.file], executor=SerialExecutor())
    if len(job.traces) != 1:
        raise UsageError(f"{args.file}: expected one ET file")
    (rank, trace), = job.traces.items()
    critical = None
    if not args.no_critical_path:
        path = critical_path(job)
        critical = set(path.row[path.rank == rank].tolist())
    out, graph, how = write_graph(trace, output, around=args.around, depth=args.depth, filters=args.filter,
                                  max_nodes=args.max_nodes, critical_rows=critical)
    drawn = "" if how == "text" else f" (drawn with {how})"
    print(f"wrote {out}: {len(graph.rows)} nodes, {len(graph.edges)} edges, {len(graph.critical)} on the "
          f"critical path{drawn}")
    return 0
