"""``etkit generate llm-serve``: an LLM serving run (continuous batching, colocated or disaggregated)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..vocab import DEVICES, DTYPES, LLM_MODELS, SERVE_PRESETS
from .common import (
    add_quiet,
    add_simulation_inputs,
    add_workers,
    explicit_executor,
    non_negative_int,
    positive_float,
    positive_int,
    prefix_arg,
)


def _split(text: str) -> tuple[int, int]:
    """argparse ``type=`` for ``PREFILL_GPUS:DECODE_GPUS``."""
    parts = text.split(":")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 2 or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not PREFILL_GPUS:DECODE_GPUS (two positive whole numbers)")
    return values  # type: ignore[return-value]


def _length(text: str) -> str:
    from ..errors import UsageError
    from ..generate.requests import parse_length

    try:
        parse_length(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def register(subparsers: argparse._SubParsersAction) -> None:

    parser = subparsers.add_parser(
        "llm-serve", help="an LLM serving run: prefill, decode, continuous batching, disaggregation",
        description="Write PREFIX.<rank>.et and PREFIX.comm_groups.json for a serving run of an LLM: requests "
                    "arrive (a file or a Poisson load), engines batch them step by step as vLLM does (decode tokens "
                    "with prefill chunks, KV-cache admission and preemption), each step's compute from the device "
                    "roofline with tensor-parallel all-reduces, expert all-to-alls and pipeline send/recv; "
                    "disaggregated serving sends each request's KV cache from a prefill to a decode instance. "
                    "`etkit simulate PREFIX` then reports TTFT, TPOT, latency, throughput and goodput.")
    parser.add_argument("-o", "--output", type=prefix_arg, metavar="PREFIX",
                        help="output prefix (default: the model's name + '-serve', in the current folder)")
    parser.add_argument("--serving-preset", choices=SERVE_PRESETS, metavar="NAME",
                        help="model, tensor/expert parallelism, device and system preset together: "
                             + ", ".join(SERVE_PRESETS))
    model = parser.add_argument_group("model")
    model.add_argument("--model", choices=LLM_MODELS, default=None, help="preset (default llama3-8b)")
    for option, dest, kind, text in _model_fields():
        model.add_argument(option, dest=dest, type=kind, default=None, help=f"{text} (default: preset)")
    load = parser.add_argument_group("requests (a file, or a synthetic Poisson load)")
    load.add_argument("--requests", metavar="FILE",
                      help="CSV (header row) or JSON Lines: arrival_s|arrival_ms|arrival_us, prompt_tokens, "
                           "output_tokens per request")
    load.add_argument("--rate", type=positive_float, metavar="R", help="synthetic load: requests per second")
    span = load.add_mutually_exclusive_group()
    span.add_argument("--duration", type=positive_float, metavar="S", help="synthetic load: seconds of arrivals")
    span.add_argument("--count", type=positive_int, metavar="N", help="synthetic load: number of requests")
    load.add_argument("--prompt-len", type=_length, default="512", metavar="DIST",
                      help="prompt tokens: N, uniform:LO:HI, normal:MEAN:STD, lognormal:MEDIAN:SIGMA or exp:MEAN "
                           "(default 512)")
    load.add_argument("--output-len", type=_length, default="128", metavar="DIST",
                      help="output tokens, same forms (default 128)")
    load.add_argument("--seed", type=non_negative_int, default=0, help="seed of the synthetic load (default 0)")
    layout = parser.add_argument_group("instances")
    for name, text in (("tp", "tensor"), ("pp", "pipeline"), ("ep", "expert")):
        layout.add_argument(f"--{name}", type=positive_int, default=None,
                            help=f"{text}-parallel degree per instance (default 1, or the serving preset's)")
    layout.add_argument("--instances", type=positive_int, default=1,
                        help="colocated engines (each tp x pp GPUs) sharing the load (default 1)")
    layout.add_argument("--disaggregated", type=_split, metavar="PREFILL_GPUS:DECODE_GPUS",
                        help="separate prefill and decode instances (DistServe/Splitwise) on that many GPUs each")
    engine = parser.add_argument_group("engine (vLLM's names: max_num_batched_tokens, max_num_seqs, "
                                       "gpu_memory_utilization, block_size)")
    engine.add_argument("--max-batch-tokens", type=positive_int, default=8192, help="tokens per step (default 8192)")
    engine.add_argument("--max-running", type=positive_int, default=256, help="running requests (default 256)")
    engine.add_argument("--kv-cache-frac", type=positive_float, default=0.9, metavar="F",
                        help="fraction of device memory for weights + KV cache (default 0.9)")
    engine.add_argument("--block-size", type=positive_int, default=16, help="tokens per KV block (default 16)")
    engine.add_argument("--dtype", default="bf16", choices=DTYPES, help="weights, activations, KV cache")
    engine.add_argument("--layers-per-node", type=non_negative_int, default=0, metavar="N",
                        help="layers per compute node of a step (default 0: a pipeline stage's layers in one node)")
    device = parser.add_argument_group("device")
    device.add_argument("--device", choices=DEVICES, default=None,
                        help="roofline device (default H100, or the preset's)")
    device.add_argument("--efficiency", type=positive_float, default=None,
                        help="fraction of the roofline kernels reach (default 0.5)")
    add_simulation_inputs(parser, whatif=False)
    for action in parser._actions:
        if action.dest in ("network", "system", "preset"):
            action.help = f"{action.help}; the system the scheduler's clock plans on (default: the serving preset's, " \
                          "else an NVLink-class estimate)"
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    from ..generate.requests import RequestSource
    from ..generate.serve import SERVE_PRESETS, llm_serve

    started = time.perf_counter()
    chosen: dict[str, Any] = dict(SERVE_PRESETS[args.serving_preset]) if args.serving_preset else {}
    model = args.model or chosen.get("model", "llama3-8b")
    if args.requests and (args.rate or args.duration or args.count):
        raise UsageError("give --requests FILE or a synthetic load (--rate with --duration or --count), not both")
    if args.requests:
        source = RequestSource(file=args.requests)
    elif args.rate:
        if not (args.duration or args.count):
            raise UsageError("a synthetic load needs --duration S or --count N with --rate")
        source = RequestSource(rate=args.rate, duration_s=args.duration, count=args.count,
                               prompt_len=args.prompt_len, output_len=args.output_len, seed=args.seed)
    else:
        raise UsageError("no requests: give --requests FILE, or --rate R with --duration S or --count N")
    preset = args.preset or (chosen.get("system") if not (args.network or args.system) else None)
    comm_ns = None
    tp, pp, ep = (args.tp or int(chosen.get("tp", 1))), (args.pp or 1), (args.ep or int(chosen.get("ep", 1)))
    per = tp * pp
    world = sum(args.disaggregated) if args.disaggregated else per * args.instances
    if preset or args.network or args.system:
        from ..simulate import Knobs, load_config
        from ..simulate.probe import comm_cost

        network, system, _ = load_config(args.network, args.system, preset=preset)
        comm_ns = comm_cost(network, system, world, Knobs(congestion=args.congestion))
    fields = {dest: getattr(args, dest, None) for _, dest, _, _ in _model_fields()}
    job = llm_serve(model, requests=source, tp=tp, pp=pp, ep=ep, instances=args.instances,
                    disaggregated=args.disaggregated, device=args.device or chosen.get("device", "H100"),
                    efficiency=args.efficiency, max_batch_tokens=args.max_batch_tokens, max_running=args.max_running,
                    kv_cache_frac=args.kv_cache_frac, block_size=args.block_size, dtype=args.dtype,
                    layers_per_node=args.layers_per_node, comm_ns=comm_ns, **fields)
    output = args.output or f"{job.spec.model.name}-serve"
    job.write(output, executor=explicit_executor(args), quiet=args.quiet)
    layout = job.spec.layout
    steps = [len(job.steps(i)) for i in range(layout.count)]
    clock = max((s.end_ns for i in range(layout.count) for s in job.steps(i)), default=0.0)
    kind = (f"{layout.prefill} prefill + {layout.decode} decode instances" if layout.disaggregated
            else f"{layout.count} instance(s)")
    print(f"wrote {job.world_size} ranks {output}.<rank>.et"
          f"{f' and {output}.comm_groups.json' if job.groups.groups else ''} in {time.perf_counter() - started:.2f} s")
    print(f"  {job.spec.model.name} on {job.spec.device.name}: {kind} of tp {tp} x pp {pp}"
          f"{f' (ep {ep})' if ep > 1 else ''}, KV cache {job.kv_capacity_tokens:,} tokens per instance")
    print(f"  {len(job.spec.requests):,} requests, {sum(steps):,} engine steps, "
          f"{clock / 1e9:,.3f} s on the scheduler's clock{'' if comm_ns else ' (NVLink-class estimate)'}")
    print(f"  next: etkit simulate {output} --preset {preset or 'hgx-h100'}  (TTFT, TPOT, goodput)")
    return 0


def _model_fields() -> tuple:
    from .generate_llm import _MODEL_FIELDS

    return tuple(f for f in _MODEL_FIELDS if f[1] != "seq_len")
