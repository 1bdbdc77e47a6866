"""``etkit anonymize PREFIX -o OUT``: a copy of a job that can be shared outside the company that traced it.

Node names become their op class (aten::mm -> gemm, with its FLOPs), attributes other than the numbers
simulators and analyses read go, tensor ids are renumbered, strings and scalar arguments go, process
groups are renumbered, timestamps start at 1 us; shapes, durations and comm sizes are kept, bucketed,
jittered or rounded as asked. The policy (--print-policy shows the default; --policy FILE overrides any
of its keys) says exactly what is kept.

Printed proof: every input string of 4+ characters with a letter (node names, attribute strings, the
strings inside IOInfo, metadata, group names, the input's file paths) searched in every output byte,
and the output validated. --verify also simulates and analyses both jobs and compares them. Exit 0 when
the proof holds, 1 when a string was found or the output does not validate, 2 on errors.
"""

from __future__ import annotations

import argparse
import sys

from ..vocab import PRESETS
from .common import add_json, add_quiet, add_workers, default_output, executor_from, prefix_arg, text_wanted, write_json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("anonymize", help="remove what identifies the model and company from a job, keep what "
                              "simulators and analyses need", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prefix", nargs="?", help="job prefix (PREFIX.<rank>.et) or one .et file")
    p.add_argument("-o", "--output", type=prefix_arg, metavar="OUT", help="prefix of the anonymised job (OUT.<rank>.et, "
                   "OUT.comm_groups.json); not the input's (default: the job's name + -anon, in the current folder)")
    p.add_argument("--policy", metavar="POLICY.yml", help="YAML policy: any key of the default (--print-policy) to change")
    p.add_argument("--print-policy", action="store_true", help="print the policy in effect (the default, or with "
                   "--policy and the options below applied) and exit")
    p.add_argument("--shapes", choices=("keep", "bucket", "drop"), help="tensor shapes: keep, bucket (every "
                   "dimension rounded up to a power of two) or drop (default: the policy's, keep)")
    p.add_argument("--jitter", type=_fraction, metavar="R", help="jitter each rank's clock: every gap between two events "
                   "(so every duration) times a seeded factor in [1-R, 1+R], no event changes order (e.g. 0.02; "
                   "default: the policy's, 0 = durations kept)")
    p.add_argument("--seed", type=int, help="seed of --jitter (default: the policy's, 0)")
    p.add_argument("--comm-sizes", choices=("keep", "pow2"), help="comm_size: keep, or pow2 (rounded up to a power "
                   "of two); default: the policy's, keep")
    p.add_argument("--comm-groups", metavar="G.json", help="comm groups JSON of the input (default PREFIX.comm_groups.json)")
    p.add_argument("--verify", action="store_true", help="also simulate and analyse the input and the output and compare "
                   "(identical with durations and sizes kept, within the jitter otherwise); loads both jobs")
    p.add_argument("--preset", default="hgx-h100", choices=PRESETS,
                   help="system --verify simulates on (default hgx-h100)")
    p.add_argument("--network", metavar="NET.yml", help="network --verify simulates on instead of --preset")
    p.add_argument("--system", metavar="SYS", help="system JSON for --network")
    add_json(p, "the report")
    add_quiet(p)
    add_workers(p)
    p.set_defaults(func=run)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in [0, 1) (e.g. 0.02)")
    return value


def run(args: argparse.Namespace) -> int:
    from ..anonymize import DEFAULT_POLICY_TEXT, anonymize, compare_jobs, load_policy
    from ..errors import UsageError

    policy = load_policy(args.policy).with_options(shapes=args.shapes, jitter=args.jitter, seed=args.seed,
                                                   comm_sizes=args.comm_sizes)
    if args.print_policy:
        sys.stdout.write(DEFAULT_POLICY_TEXT if policy == load_policy(None) else policy.to_yaml())
        return 0
    if not args.prefix:
        raise UsageError("give the job's PREFIX (or --print-policy)")
    output = args.output or default_output(args.prefix, "-anon")
    executor = executor_from(args)
    report = anonymize(args.prefix, output, policy=policy, comm_groups=args.comm_groups, executor=executor)
    show = print if text_wanted(args) else (lambda *_: None)
    show("\n".join(report.lines()))
    data = report.to_json()
    ok = report.ok
    if args.verify:
        comparison = compare_jobs(args.prefix, output, network=args.network, system=args.system,
                                  preset=args.preset, executor=executor)
        show("\n".join(comparison.lines()))
        bound = policy.jitter
        if policy.comm_sizes != "keep":  # rounded sizes simulate differently by design: shown, not judged
            within, verdict = True, "sizes rounded: no claim"
        elif bound == 0:
            within = comparison.identical
            verdict = "identical" if within else "DIFFERENT"
        else:
            within = comparison.within(bound)
            verdict = f"within {bound:.1%}" if within else f"NOT within {bound:.1%}"
        print(f"verify: {verdict}")
        data["verify"] = {"makespan_ns": comparison.makespan_ns, "identical": comparison.identical,
                          "breakdown_change": comparison.breakdown_change, "within": within}
        ok = ok and within
    if args.json:
        write_json(data, args.json)
    return 0 if ok else 1
