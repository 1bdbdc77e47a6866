"""Synthetic DLRM training jobs: one step of a recommendation model, embeddings model-parallel, MLPs data-parallel.

The layout is the DLRM paper's hybrid: every rank runs the bottom and top MLPs on its local batch (data
parallel, gradients all-reduced over all ranks in buckets that overlap backward), while embedding tables
are sharded table-wise, table ``i`` on rank ``i % npus``. A rank looks up its tables for the global
batch, and an all-to-all hands every rank the pooled embeddings of its local batch (and, in backward,
sends the embedding gradients back to the table owners, which update their rows in place).

All-to-all splits are equal: each rank's buffer is sized for ``ceil(tables / npus)`` tables, so ranks
holding one table fewer (or none) pad, as collective libraries need equal splits. Ranks differ only in
how many tables they hold, so the job has at most two roles (templates).
"""

from __future__ import annotations

import dataclasses
import math
import os

from ..errors import UsageError
from ..executor import Executor
from ..format.schema import CommType
from ..model.devices import Device, get_device
from ..model.groups import ProcessGroups
from ..model.template import RankPlan, TraceTemplate, synthetic_metadata
from ..records import record
from .training import DTYPE_BYTES, ComputeChain, GeneratedJob, GradientBuckets, JobSummary

__all__ = ["DLRM_MODELS", "DlrmConfig", "DlrmJob", "DlrmSpec", "dlrm", "write_dlrm"]

#: SGD on the dense MLPs: FLOPs and bytes per parameter (read weight and grad, write weight; fp32).
SGD_FLOPS_PER_PARAM = 2
SGD_BYTES_PER_PARAM = 12
#: The group every rank belongs to (all-to-all and MLP gradient all-reduce).
ALL_RANKS_GROUP = "1"


@record(frozen=True)
class DlrmConfig:
    """A DLRM: bottom MLP over dense features, ``tables`` embedding tables, pairwise dot interaction, top MLP.

    ``bottom_mlp`` and ``top_mlp`` are output widths; the bottom MLP's last width must equal
    ``embedding_dim``. ``pooling``: lookups per table per sample (multi-hot).
    """

    name: str
    dense_features: int
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    tables: int
    embedding_dim: int
    pooling: int = 1

    def __post_init__(self) -> None:
        if not self.bottom_mlp or not self.top_mlp:
            raise UsageError(f"model {self.name}: bottom and top MLP need at least one layer")
        if self.bottom_mlp[-1] != self.embedding_dim:
            raise UsageError(f"model {self.name}: bottom MLP output {self.bottom_mlp[-1]} must equal "
                             f"embedding dim {self.embedding_dim}")
        if min(self.dense_features, self.tables, self.embedding_dim, self.pooling, *self.bottom_mlp,
               *self.top_mlp) < 1:
            raise UsageError(f"model {self.name}: sizes must be >= 1")

    @property
    def interaction_features(self) -> int:
        """Top-MLP input: the bottom output plus one dot product per pair of the tables + 1 vectors."""
        vectors = self.tables + 1
        return self.embedding_dim + vectors * (vectors - 1) // 2

    def mlp_shapes(self) -> list[tuple[str, int, int]]:
        """``(name, in, out)`` of every MLP layer, bottom then top."""
        shapes = []
        width = self.dense_features
        for i, out in enumerate(self.bottom_mlp):
            shapes.append((f"bottom_mlp{i}", width, out))
            width = out
        width = self.interaction_features
        for i, out in enumerate(self.top_mlp):
            shapes.append((f"top_mlp{i}", width, out))
            width = out
        return shapes


#: MLPerf DLRM (Criteo 1TB) and a small one for tests.
DLRM_MODELS: dict[str, DlrmConfig] = {
    "dlrm-mlperf": DlrmConfig("dlrm-mlperf", 13, (512, 256, 128), (1024, 1024, 512, 256, 1), 26, 128),
    "dlrm-small": DlrmConfig("dlrm-small", 13, (256, 64), (256, 128, 1), 8, 64, pooling=4),
}


@record(frozen=True)
class DlrmSpec:
    """Everything that defines a generated DLRM job (hashable, picklable)."""

    model: DlrmConfig
    npus: int
    batch: int          # samples per rank per step
    dtype: str
    device: Device
    bucket_mb: float = 25.0

    def __post_init__(self) -> None:
        if self.npus < 1 or self.batch < 1:
            raise UsageError("dlrm: npus and batch must be >= 1")
        if self.dtype not in DTYPE_BYTES:
            raise UsageError(f"dlrm: dtype must be one of {', '.join(DTYPE_BYTES)}")
        if self.bucket_mb <= 0:
            raise UsageError("dlrm: bucket size must be positive")

    @property
    def beta(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def tables_on(self, rank: int) -> int:
        """Tables held by ``rank`` (table ``i`` lives on rank ``i % npus``)."""
        return len(range(rank, self.model.tables, self.npus))

    @property
    def padded_tables(self) -> int:
        return math.ceil(self.model.tables / self.npus)

    @property
    def all_to_all_bytes(self) -> int:
        """Per-rank all-to-all buffer: pooled vectors of ``padded_tables`` tables for the global batch."""
        return self.npus * self.batch * self.padded_tables * self.model.embedding_dim * self.beta


class _DlrmBuilder(ComputeChain):
    """One role's step: forward, backward with overlapped gradient all-reduce, embedding update, optimizer."""

    def __init__(self, spec: DlrmSpec, tables: int, tpl: TraceTemplate) -> None:
        super().__init__(tpl, spec.device)
        self.spec, self.tables = spec, tables
        self.buckets = GradientBuckets(max(1, int(spec.bucket_mb * 1e6) // DTYPE_BYTES["fp32"]))
        self.grad_colls: list[int] = []

    def mlp(self, names: list[tuple[str, int, int]], backward: bool) -> None:
        b, beta = self.spec.batch, self.spec.beta
        for name, fan_in, fan_out in (reversed(names) if backward else names):
            flops = 2 * b * fan_in * fan_out
            nbytes = beta * (b * fan_in + fan_in * fan_out + b * fan_out)
            if not backward:
                self.comp(f"fwd.{name}", flops, nbytes)
                continue
            node = self.comp(f"bwd.{name}", 2 * flops, 2 * nbytes)
            self.reduce_grads(self.buckets.add(fan_in * fan_out + fan_out, node))

    def reduce_grads(self, bucket: tuple[int, int] | None) -> None:
        if bucket is not None and self.spec.npus > 1:
            params, producer = bucket
            self.grad_colls.append(self.coll(f"grad_all_reduce.bucket{len(self.grad_colls)}", CommType.ALL_REDUCE,
                                             params * DTYPE_BYTES["fp32"], "all", deps=[producer]))

    def lookup_cost(self) -> tuple[int, int]:
        """(FLOPs, bytes) of pooling this rank's tables over the global batch."""
        spec, m = self.spec, self.spec.model
        rows = spec.npus * spec.batch * self.tables * m.pooling
        pooled = spec.npus * spec.batch * self.tables
        return rows * m.embedding_dim, spec.beta * (rows + pooled) * m.embedding_dim + 8 * rows

    def exchange(self, name: str, after: int | None) -> int | None:
        if self.spec.npus == 1:
            return None
        return self.coll(name, CommType.ALL_TO_ALL, self.spec.all_to_all_bytes, "all",
                         deps=[after] if after is not None else [])

    def build(self) -> TraceTemplate:
        spec, m = self.spec, self.spec.model
        b, beta, vectors = spec.batch, spec.beta, m.tables + 1
        shapes = m.mlp_shapes()
        bottom, top = shapes[:len(m.bottom_mlp)], shapes[len(m.bottom_mlp):]
        lookup_flops, lookup_bytes = self.lookup_cost()
        # Embedding lookup first, so its all-to-all overlaps the bottom MLP.
        lookup = self.comp("fwd.embedding_lookup", lookup_flops, lookup_bytes) if self.tables else None
        exchanged = self.exchange("fwd.embedding_all_to_all", lookup)
        self.mlp(bottom, backward=False)
        if exchanged is not None:
            self.waits.append(exchanged)
        inter_flops = 2 * b * vectors * vectors * m.embedding_dim
        inter_bytes = beta * b * (2 * vectors * m.embedding_dim + vectors * vectors)
        self.comp("fwd.interaction", inter_flops, inter_bytes)
        self.mlp(top, backward=False)
        self.comp("fwd.loss", 4 * b, 2 * beta * b)
        self.mlp(top, backward=True)
        self.comp("bwd.interaction", 2 * inter_flops, 2 * inter_bytes)
        # Embedding gradients go back to the table owners while the bottom MLP's backward runs.
        returned = self.exchange("bwd.embedding_all_to_all", self.last_comp)
        self.mlp(bottom, backward=True)
        self.reduce_grads(self.buckets.flush())
        if returned is not None:
            self.waits.append(returned)
        if self.tables:
            self.comp("bwd.embedding_update", lookup_flops, 2 * lookup_bytes)
        self.waits += self.grad_colls
        params = sum(i * o + o for _, i, o in shapes)
        self.comp("optimizer", SGD_FLOPS_PER_PARAM * params, SGD_BYTES_PER_PARAM * params)
        return self.tpl


class DlrmJob(GeneratedJob):
    """A generated DLRM step: one template per distinct table count (role ``tables<k>``)."""

    def __init__(self, spec: DlrmSpec) -> None:
        super().__init__()
        self.spec = spec
        self.world_size = spec.npus
        self.groups = ProcessGroups({ALL_RANKS_GROUP: tuple(range(spec.npus))} if spec.npus > 1 else {})

    def build_template(self, role: str) -> TraceTemplate:
        tables = int(role.removeprefix("tables"))
        meta = synthetic_metadata("etkit.generate.dlrm", model=self.spec.model.name, tables=tables,
                                  npus=self.spec.npus, device=self.spec.device.name)
        return _DlrmBuilder(self.spec, tables, TraceTemplate(meta)).build()

    def plan(self, rank: int) -> RankPlan:
        return RankPlan(rank, f"tables{self.spec.tables_on(rank)}", {"all": ALL_RANKS_GROUP})


def dlrm(model: str | DlrmConfig = "dlrm-mlperf", *, npus: int = 8, batch: int = 2048, dtype: str = "fp32",
         device: str | Device = "H100", efficiency: float | None = None, bucket_mb: float = 25.0,
         **model_fields: object) -> DlrmJob:
    """A synthetic DLRM training step on ``npus`` ranks, ``batch`` samples per rank.

    ``model_fields`` override the preset (``tables=64``, ``embedding_dim=...``, ``bottom_mlp=(...)``).
    """
    if isinstance(model, str):
        if model.lower() not in DLRM_MODELS:
            raise UsageError(f"unknown DLRM model {model!r}; presets: {', '.join(DLRM_MODELS)}")
        model = DLRM_MODELS[model.lower()]
    changes = {k: (tuple(v) if isinstance(v, list) else v) for k, v in model_fields.items() if v is not None}
    if changes:
        unknown = set(changes) - {f.name for f in dataclasses.fields(DlrmConfig)}
        if unknown:
            raise UsageError(f"unknown DLRM field(s): {', '.join(sorted(unknown))}")
        model = dataclasses.replace(model, **changes)  # type: ignore[arg-type]
    return DlrmJob(DlrmSpec(model, npus, batch, dtype, get_device(device, efficiency), bucket_mb))


def write_dlrm(prefix: str | os.PathLike[str], *, executor: Executor | None = None, quiet: bool = True,
              **kwargs: object) -> JobSummary:
    """Generate ``dlrm(**kwargs)``, write it under ``prefix`` (see :meth:`GeneratedJob.write`), return its summary."""
    job = dlrm(**kwargs)  # type: ignore[arg-type]
    job.write(prefix, executor=executor, quiet=quiet)
    return job.summary()
