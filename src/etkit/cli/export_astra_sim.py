"""``etkit export astra-sim PREFIX [-o OUT] [--network NET.yml --system SYS.json | --preset P]``."""

from __future__ import annotations

import argparse

from .common import (
    add_json,
    add_quiet,
    add_simulation_inputs,
    add_workers,
    default_output,
    executor_from,
    prefix_arg,
    text_wanted,
    write_json,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "astra-sim", help="ETs that ASTRA-sim 2.x runs to the end, at the cost etkit gives them",
        description="Write OUT.<rank>.et and OUT.comm_groups.json that ASTRA-sim's analytical backends run to "
                    "the end: comm groups numbered from 1, METADATA/INVALID nodes dropped (dependencies kept), "
                    "barrier/broadcast/reduce/gather/scatter/reduce-scatter-block written as collectives "
                    "ASTRA-sim runs at the same cost in etkit's model, uneven collective sizes made equal, "
                    "SEND/RECV with comm_src/comm_dst/comm_tag, measured traces as etkit replays them. With a "
                    "network and system (or --preset), also OUT.network.yml, OUT.system.json and OUT.memory.json, "
                    "and the command that runs ASTRA-sim on them. What ASTRA-sim would refuse or hang on and "
                    "the export cannot fix is one error naming rank and node. See docs/guide/simulate.md.")
    parser.add_argument("inputs", nargs="+", metavar="PREFIX|FILE", help="job prefix (PREFIX.<rank>.et) or .et files")
    parser.add_argument("-o", "--output", type=prefix_arg, metavar="OUT",
                        help="output prefix: writes OUT.<rank>.et and OUT.comm_groups.json; not the input's "
                             "(default: the job's name + -astra, in the current folder)")
    parser.add_argument("--comm-groups", metavar="G.json",
                        help='comm groups JSON {"<pg_name>": [ranks]} (default PREFIX.comm_groups.json; STAGE jobs: '
                             "their workload.json)")
    add_simulation_inputs(parser, whatif=False)
    parser.add_argument("--astra-sim", dest="binary", metavar="BIN",
                        help="the ASTRA-sim executable the printed command names (default: "
                             "AstraSim_Analytical_Congestion_Unaware, or ..._Aware with --congestion aware)")
    add_json(parser, "what was written (files, groups, changes, command)")
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..export import astra_sim
    from .common import wants_simulation

    network = system = None
    if wants_simulation(args):
        from ..simulate import load_config

        network, system, _ = load_config(args.network, args.system, preset=args.preset)
    spec = args.inputs[0] if len(args.inputs) == 1 else args.inputs
    output = args.output or default_output(args.inputs[0], "-astra")
    done = astra_sim(spec, output, comm_groups=args.comm_groups, network=network, system=system,
                     congestion=args.congestion, binary=args.binary, executor=executor_from(args))
    if args.json is not None:
        write_json(done.to_json(), args.json)
    if not text_wanted(args):
        return 0
    groups = f"{len(done.groups)} group" + ("" if len(done.groups) == 1 else "s")
    print(f"wrote {done.ranks} ranks to {done.prefix}.<rank>.et and {done.comm_groups} ({groups}); "
          f"{done.nodes_in:,} -> {done.nodes_out:,} nodes")
    for what, count in done.changes.items():
        print(f"  {what}: {count:,}")
    for note in done.notes:
        print(f"  note: {note}")
    if done.command:
        print(f"configs: {done.network}, {done.system}, {done.memory}")
        print("run on ASTRA-sim:")
        print(done.command)
    return 0
