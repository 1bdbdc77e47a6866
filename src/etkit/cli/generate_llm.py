"""``etkit generate llm``: a synthetic LLM training step (model preset + parallel layout + device)."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from ..vocab import DEVICES, DTYPES, LLM_MODELS, RECOMPUTE_MODES, SCHEDULES
from .common import add_quiet, add_workers, explicit_executor, prefix_arg

if TYPE_CHECKING:
    from ..generate.training import JobSummary

#: Model fields that may override the preset: (option, field, type, help).
_MODEL_FIELDS = (
    ("--layers", "layers", int, "transformer layers"),
    ("--hidden", "hidden", int, "hidden size"),
    ("--heads", "heads", int, "attention heads"),
    ("--kv-heads", "kv_heads", int, "key/value heads (grouped-query attention)"),
    ("--ffn", "ffn", int, "FFN inner size"),
    ("--vocab", "vocab", int, "vocabulary size"),
    ("--seq-len", "seq_len", int, "sequence length"),
    ("--experts", "experts", int, "experts per MoE layer (1 = dense)"),
    ("--top-k", "top_k", int, "experts per token"),
    ("--capacity-factor", "capacity_factor", float, "scales the expert all-to-all volume"),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "llm", help="one training step of a transformer under a parallel layout",
        description="Write PREFIX.<rank>.et and PREFIX.comm_groups.json for one training step of an LLM: "
                    "forward/backward/optimizer compute with FLOPs, bytes and roofline durations, tensor/"
                    "sequence/expert-parallel collectives, pipeline send/recv, bucketed gradient reduction.")
    parser.add_argument("-o", "--output", type=prefix_arg, metavar="PREFIX",
                        help="output prefix (default: the model's name, in the current folder)")
    model = parser.add_argument_group("model")
    model.add_argument("--model", default="llama3-8b", choices=LLM_MODELS, help="preset (default llama3-8b)")
    for option, dest, kind, text in _MODEL_FIELDS:
        model.add_argument(option, dest=dest, type=kind, default=None, help=f"{text} (default: preset)")
    model.add_argument("--ffn-kind", choices=("swiglu", "gelu"), default=None,
                       help="swiglu (3 FFN matrices) or gelu (2) (default: preset)")
    model.add_argument("--tied-embeddings", dest="tied_embeddings", action="store_true", default=None,
                       help="output head shares the input embedding (default: preset)")
    model.add_argument("--untied-embeddings", dest="tied_embeddings", action="store_false",
                       help="separate output head")
    train = parser.add_argument_group("batch and precision")
    train.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch (default 1)")
    batches = train.add_mutually_exclusive_group()
    batches.add_argument("--micro-batches", dest="microbatches", type=int, default=None,
                         help="micro-batches per step on each data-parallel rank (default 8)")
    batches.add_argument("--global-batch", type=int, default=None,
                         help="sequences per step over the job (= micro-batch x micro-batches x dp)")
    train.add_argument("--dtype", default="bf16", choices=DTYPES, help="activations and weights")
    train.add_argument("--grad-dtype", default="fp32", choices=DTYPES,
                       help="gradient reduction dtype (default fp32, as Megatron with bf16)")
    layout = parser.add_argument_group("parallel layout")
    for name, text in (("dp", "data"), ("tp", "tensor"), ("pp", "pipeline"), ("ep", "expert")):
        layout.add_argument(f"--{name}", type=int, default=1, help=f"{text}-parallel degree (default 1)")
    layout.add_argument("--sp", "--sequence-parallel", dest="sequence_parallel", action="store_true",
                        help="Megatron sequence parallelism (all-gather + reduce-scatter instead of all-reduce)")
    layout.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3), help="ZeRO stage (default 0)")
    layout.add_argument("--fsdp", action="store_true", help="fully sharded data parallel (= --zero 3)")
    layout.add_argument("--recompute", default="none", choices=RECOMPUTE_MODES, help="activation recomputation")
    layout.add_argument("--schedule", default="1f1b", choices=SCHEDULES, help="pipeline schedule (default 1f1b)")
    add_common_options(parser, layout, run)


def add_common_options(parser: argparse.ArgumentParser, layout: argparse._ArgumentGroup, func) -> None:  # noqa: ANN001
    """Gradient buckets, device, workers, quiet: the options every training-job generator shares."""
    layout.add_argument("--bucket-mb", type=float, default=25.0, help="gradient bucket size in MB (default 25)")
    device = parser.add_argument_group("device")
    device.add_argument("--device", default="H100", choices=DEVICES, help="roofline preset (default H100)")
    device.add_argument("--efficiency", type=float, default=None,
                        help="fraction of the roofline kernels reach (default 0.5)")
    add_workers(parser)
    for action in parser._actions:  # the shared help says "default: CPU count"; writing picks by job size
        if action.dest == "workers":
            action.help = "writer processes (default: in-process below 4,096 ranks, else CPU count)"
    add_quiet(parser)
    parser.set_defaults(func=func)


def print_summary(output: str, summary: JobSummary, started: float) -> None:
    print(f"wrote {summary.world_size} ranks {output}.<rank>.et"
          f"{f' and {output}.comm_groups.json' if summary.groups else ''} in {time.perf_counter() - started:.2f} s")
    for line in summary.lines():
        print(f"  {line}")


def run(args: argparse.Namespace) -> int:
    from ..generate.llm import write_llm

    started = time.perf_counter()
    fields = {dest: getattr(args, dest) for _, dest, _, _ in _MODEL_FIELDS}
    fields["ffn_kind"] = args.ffn_kind
    output = args.output or args.model
    summary = write_llm(
        output, executor=explicit_executor(args), quiet=args.quiet,
        model=args.model, tied_embeddings=args.tied_embeddings,
        dp=args.dp, tp=args.tp, pp=args.pp, ep=args.ep, sequence_parallel=args.sequence_parallel,
        zero=args.zero, fsdp=args.fsdp, recompute=args.recompute, schedule=args.schedule,
        bucket_mb=args.bucket_mb, micro_batch=args.micro_batch, microbatches=args.microbatches,
        global_batch=args.global_batch, dtype=args.dtype, grad_dtype=args.grad_dtype, device=args.device,
        efficiency=args.efficiency, **fields)
    print_summary(output, summary, started)
    return 0
