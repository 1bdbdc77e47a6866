"""``etkit generate dlrm``: a synthetic DLRM training step (embedding all-to-all, MLP all-reduce)."""

from __future__ import annotations

import argparse
import time

from ..vocab import DLRM_MODELS, DTYPES
from .common import add_ranks, explicit_executor, prefix_arg
from .generate_llm import add_common_options, print_summary


def _widths(text: str) -> tuple[int, ...]:
    """``512-256-128`` -> (512, 256, 128)."""
    try:
        widths = tuple(int(part) for part in text.replace(",", "-").split("-") if part)
    except ValueError:
        raise argparse.ArgumentTypeError(f"MLP widths must look like 512-256-128, got {text!r}") from None
    if not widths:
        raise argparse.ArgumentTypeError("an MLP needs at least one layer")
    return widths


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dlrm", help="one training step of a DLRM (model-parallel embeddings, data-parallel MLPs)",
        description="Write PREFIX.<rank>.et and PREFIX.comm_groups.json for one DLRM training step: embedding "
                    "lookups of table-wise sharded tables, all-to-all of pooled embeddings and their "
                    "gradients, bottom/top MLPs with bucketed gradient all-reduce overlapping backward.")
    parser.add_argument("-o", "--output", type=prefix_arg, metavar="PREFIX",
                        help="output prefix (default: the model's name, in the current folder)")
    parser.add_argument("--model", default="dlrm-mlperf", choices=DLRM_MODELS,
                        help="preset (default dlrm-mlperf)")
    add_ranks(parser, npus_alias=True, default=8, help="ranks (default 8; --npus: ASTRA-sim's name)")
    parser.add_argument("--batch", type=int, default=2048, help="samples per rank per step (default 2048)")
    parser.add_argument("--tables", type=int, default=None, help="embedding tables (default: preset)")
    parser.add_argument("--embedding-dim", type=int, default=None, help="embedding width (default: preset)")
    parser.add_argument("--pooling", type=int, default=None, help="lookups per table per sample (default: preset)")
    parser.add_argument("--dense-features", type=int, default=None, help="bottom-MLP inputs (default: preset)")
    parser.add_argument("--bottom-mlp", type=_widths, default=None, metavar="W-W-...",
                        help="bottom MLP widths; the last must equal the embedding dim (default: preset)")
    parser.add_argument("--top-mlp", type=_widths, default=None, metavar="W-W-...",
                        help="top MLP widths (default: preset)")
    parser.add_argument("--dtype", default="fp32", choices=DTYPES, help="default fp32")
    add_common_options(parser, parser.add_argument_group("training"), run)


def run(args: argparse.Namespace) -> int:
    from ..generate.dlrm import write_dlrm

    started = time.perf_counter()
    output = args.output or args.model
    summary = write_dlrm(
        output, executor=explicit_executor(args), quiet=args.quiet,
        model=args.model, npus=args.ranks, batch=args.batch,
        dtype=args.dtype, device=args.device, efficiency=args.efficiency, bucket_mb=args.bucket_mb,
        tables=args.tables, embedding_dim=args.embedding_dim, pooling=args.pooling,
        dense_features=args.dense_features, bottom_mlp=args.bottom_mlp, top_mlp=args.top_mlp)
    print_summary(output, summary, started)
    return 0
