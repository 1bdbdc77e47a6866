"""Chakra ETs from Kineto traces alone: what most profiler users hold (HTA's whole user base).

Without a host execution trace the dependency graph is rebuilt from the Kineto trace itself, as Lumos
(https://arxiv.org/abs/2504.09307) does: every CPU op (``cpu_op``, ``user_annotation``) becomes a host op
whose parent is the op that encloses it on its thread (intra-thread order), every CUDA runtime call one
more, the GPU activity it launched hangs under it by ``correlation`` (CPU -> GPU launch), activity follows
its stream (stream order), ``cuda_sync`` records become cross-stream and host-device dependencies
(:mod:`.device`), and communication is read from the trace: NCCL ``record_param_comms`` and kernel args
(collective name, element count and type, process group and its ranks), gloo's ``c10d::*`` dispatcher ops
with their arguments (``Input Dims``, ``Input type``, ``Concrete Inputs``: the peer and tag of a
send/recv) and the ``gloo:*`` backend ranges that time them. The host ops so built go through the same
linking and conversion as a host trace's (:func:`etkit.pytorch.convert.convert_linked`), so the ETs have
the same guarantees: one COMM node per collective with its type, size, group and peers, every GPU kernel,
copy and set of the trace, dense acyclic ids, the validation rules of ``etkit validate``.

A job is a folder of Kineto traces (one per rank; the rank is ``distributedInfo.rank``, else the order of
the files) or one trace; every rank is one executor task.
"""

from __future__ import annotations

import math
import os
import re
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from ..executor import Executor, default_executor, in_client
from ..gcpause import paused_gc
from ..model.trace import Trace, trace_from_bytes
from ..records import record
from .comm import dtype_bytes
from .convert import RankReport, convert_linked, convert_linked_bytes
from .host import HostOp, HostTrace
from .kineto import KinetoTrace, load_kineto
from .link import LinkedRank, LinkReport, _link_rows

__all__ = ["KINETO_SCHEMA", "kineto_host_trace", "link_kineto", "kineto_files", "convert_kineto",
           "convert_kineto_rank", "convert_kineto_rank_trace", "is_kineto_input", "load_kineto_job", "default_prefix"]

#: The ``schema`` of a host trace built from a Kineto trace (reported as the rank's schema).
KINETO_SCHEMA = "kineto"
_EMPTY_IO = ("[]", "[]", "[]", "[]", "[]", "[]")
#: record_param_comms args -> the host trace attribute names the converter reads.
_PARAM_ATTRS = {"Collective name": "collective_name", "In msg nelems": "in_msg_nelems", "Out msg nelems": "out_msg_nelems",
                "dtype": "dtype", "Process Group Name": "pg_name", "Process Group Description": "pg_desc",
                "Group size": "group_size", "In split size": "in_split_size", "Out split size": "out_split_size",
                "Global rank start": "global_rank_start", "Global rank stride": "global_rank_stride"}
_DIGITS = re.compile(r"^-?\d+$")


def element_bytes(dtype: str) -> int:
    """Bytes per element of a Kineto type name (4 when unknown: Kineto records no type for a tensor list)."""
    return dtype_bytes(dtype) or 4


def _tensor(dims: Any, dtype: str, serial: int) -> list[Any] | None:
    """A host-trace tensor ``[id, storage, offset, numel, itemsize, device]`` from Kineto's dims and type."""
    if type(dims) is not list or not all(type(d) is int for d in dims):
        return None
    return [serial, serial, 0, math.prod(dims), element_bytes(dtype), "cpu"]


def _arguments(args: dict[str, Any], serial: list[int]) -> tuple[list[Any], list[str], bool]:
    """Host-trace style argument values and types of a communication op, from Kineto's ``Input Dims``,
    ``Input type`` and ``Concrete Inputs``; and whether a tensor list's element type had to be assumed
    (Kineto records none for a ``TensorList``: 4-byte elements are assumed)."""
    dims = args.get("Input Dims") or []
    types = args.get("Input type") or []
    concrete = args.get("Concrete Inputs") or []
    values: list[Any] = []
    names: list[str] = []
    assumed = False
    for i in range(max(len(dims), len(types), len(concrete))):
        d = dims[i] if i < len(dims) else []
        t = str(types[i]) if i < len(types) else ""
        c = concrete[i] if i < len(concrete) else ""
        if t == "TensorList" or (type(d) is list and d and all(type(x) is list for x in d)):
            serial[0] += len(d)
            values.append([_tensor(x, "float", serial[0] - k) for k, x in enumerate(d)])
            names.append("GenericList[Tensor(float)]")
            assumed = True
        elif t and dtype_bytes(t) is not None and type(d) is list:  # a tensor of that element type
            serial[0] += 1
            values.append(_tensor(d, t, serial[0]))
            names.append(f"Tensor({t})")
        elif t == "Scalar" or (type(c) is str and _DIGITS.match(c)):
            values.append(int(c) if type(c) is str and _DIGITS.match(c) else c)
            names.append("Int")
        elif t in ("String", "str", "c10::string_view"):
            values.append(str(c))
            names.append("String")
        else:
            values.append("<Object>" if c == "" else c)
            names.append("Object")
    return values, names, assumed


def kineto_host_trace(kin: KinetoTrace) -> HostTrace:
    """One host op per CPU event of ``kin`` (op ``i`` is Kineto CPU row ``i``), its parent the event that
    encloses it on its thread."""
    from .link import _kineto_nesting

    parent, _, _ = _kineto_nesting(kin)
    n = len(parent)
    serial = [1 << 40]  # tensor ids of the arguments built here: unique, never a tensor of another op
    # the fields every op has, as columns; the ops built from them at C speed (map), comm ops completed below
    ids = np.arange(1, n + 1, dtype=np.int64)
    names = np.asarray(kin.names, dtype=object)[kin.cpu_name].tolist() if n else []
    zero, none, empty = repeat(0), repeat(-1), repeat("")
    ops = list(map(HostOp, ids.tolist(), names, np.where(parent >= 0, parent + 1, ids).tolist(),
                   np.maximum(kin.cpu_rf_id, 0).tolist(), zero, none, zero, kin.cpu_tid.tolist(), zero, empty,
                   repeat(_EMPTY_IO), repeat(()), repeat(())))
    for i in sorted(kin.cpu_args):
        args = kin.cpu_args[i]
        op = ops[i]
        values, types, assumed = _arguments(args, serial)
        op.inputs, op.input_types, op.outputs = values, types, []
        op.io = (str(values), "[]", str(types), "[]", "[]", "[]")
        extra = {attr: args[key] for key, attr in _PARAM_ATTRS.items() if key in args}
        if assumed:
            extra["dtype_assumed"] = True
        op.extra = extra or None
    if not ops:
        raise UsageError(f"{kin.path}: the Kineto trace has no CPU events to build a graph from")
    return HostTrace(kin.path, KINETO_SCHEMA, min(kin.pids - {-1}, default=0), "", 0, 0, ops, kin.rank)


def link_kineto(kin: KinetoTrace) -> LinkedRank:
    """A linked rank from a Kineto trace alone (see the module docstring)."""
    host = kineto_host_trace(kin)
    if not kin.pg_config:
        kin.pg_config = _groups_from_args(kin)
    report = LinkReport(host_ops=len(host.ops), method="kineto", kineto_cpu_events=len(kin.cpu_ts))
    rows = np.arange(len(host.ops), dtype=np.int64)
    return _link_rows(host, kin, rows, report, window=(-math.inf, math.inf))  # the whole trace


def _groups_from_args(kin: KinetoTrace) -> list[dict[str, Any]]:
    """Process groups from the collectives' own args (``Process Group Name`` / ``Ranks``) when the trace's
    ``distributedInfo`` lists none."""
    found: dict[str, list[int]] = {}
    for args in list(kin.cpu_args.values()) + list(kin.gpu_args.values()):
        name, ranks = args.get("Process Group Name"), args.get("Process Group Ranks")
        if name is None or not isinstance(ranks, str):
            continue
        members = [int(x) for x in re.findall(r"-?\d+", ranks)]
        if members:
            found.setdefault(str(name), members)
    return [{"pg_name": name, "pg_desc": "", "ranks": ranks, "pg_size": len(ranks)} for name, ranks in found.items()]


@record(frozen=True)
class KinetoRank:
    rank: int
    path: Path


def is_kineto_input(spec: str | os.PathLike[str]) -> bool:
    """Whether ``spec`` is a Kineto trace, or a folder of Kineto traces with no ``.et`` file and no host
    execution trace (what ``analyze``, ``report``, ``timeline`` and ``diff`` then convert on the fly)."""
    from ..filekind import sniff

    p = Path(spec)
    if p.is_file():
        return sniff(p).name == "kineto"
    if not p.is_dir():
        return False
    if any(p.glob("*.et")) or any(p.glob("*.et.gz")):
        return False
    kinds = {sniff(f).name for f in p.iterdir() if f.is_file() and re.search(r"\.json(\.gz)?$", f.name)}
    return "kineto" in kinds and not kinds & {"host-et", "linked"}


def kineto_files(spec: str | os.PathLike[str]) -> list[KinetoRank]:
    """The Kineto traces of a job: ``spec`` itself, or the Kineto traces in the folder ``spec`` (found by
    content), each with its rank (``distributedInfo.rank``, else its place in name order)."""
    from ..filekind import sniff
    from .pairing import kineto_info

    p = Path(spec)
    if p.is_dir():
        files = [f for f in sorted(p.iterdir()) if f.is_file() and re.search(r"\.json(\.gz)?$", f.name)
                 and sniff(f).name == "kineto"]
        if not files:
            raise UsageError(f"{p}: no Kineto trace found (no Chrome-trace JSON with traceEvents among its "
                             ".json[.gz] files)")
    else:
        from ..filekind import require

        require(p, {"kineto"}, wanted="a Kineto trace")
        files = [p]
    infos = [kineto_info(f) for f in files]
    ranks = [i.rank for i in infos]
    if len(files) > 1 and (None in ranks or len(set(ranks)) != len(ranks)):
        if any(r is not None for r in ranks) and len({r for r in ranks if r is not None}) != sum(r is not None for r in ranks):
            dup = next(r for r in ranks if r is not None and ranks.count(r) > 1)
            both = [f.name for f, r in zip(files, ranks) if r == dup]
            raise UsageError(f"{p}: {both[0]} and {both[1]} are both rank {dup} (distributedInfo): one job per folder")
        ranks = list(range(len(files)))  # no (or incomplete) distributedInfo: the files in name order
    return [KinetoRank(r if r is not None else 0, f) for r, f in sorted(zip(ranks, files), key=lambda rf: rf[0] or 0)]


def convert_kineto_rank(task: tuple[Any, ...]) -> RankReport:
    """Convert one rank: ``(rank, Kineto path, output .et path[, p2p_matched])``."""
    rank, path, out = task[:3]
    with paused_gc():
        kin = load_kineto(path, rank=rank)
        return convert_linked(link_kineto(kin), out, rank=rank, p2p_matched=task[3] if len(task) > 3 else None)


def convert_kineto_rank_trace(task: tuple[Any, ...]) -> tuple[RankReport, Trace]:
    """Convert one rank in memory: ``(rank, Kineto path[, p2p_matched])`` -> its report and trace."""
    rank, path = task[:2]
    name = f"{path} (rank {rank}, converted)"
    with paused_gc():  # (the Kineto columns and host ops are freed before the ET's bytes are decoded)
        report, framed = convert_linked_bytes(link_kineto(load_kineto(path, rank=rank)), rank=rank, path=name,
                                              p2p_matched=task[2] if len(task) > 2 else None)
    return report, trace_from_bytes(framed, name)


def convert_kineto(spec: str | os.PathLike[str], prefix: str | os.PathLike[str], *,
                   executor: Executor | None = None, compress: bool = False):  # type: ignore[no-untyped-def]
    """Convert the Kineto trace ``spec`` (or every rank of the folder ``spec``) to ``<prefix>.<rank>.et`` and
    ``<prefix>.comm_groups.json``, one executor task per rank, written as one job
    (:func:`etkit.pytorch.job.convert_ranks`: send/recv whose group a rank cannot tell are settled against
    the other ranks). Returns the :class:`etkit.pytorch.job.JobReport`."""
    from .job import convert_ranks

    return convert_ranks(convert_kineto_rank, [(k.rank, (str(k.path),)) for k in kineto_files(spec)], prefix,
                         executor=executor, compress=compress)


def load_kineto_job(spec: str | os.PathLike[str], *, executor: Executor | None = None,
                    ranks: list[int] | None = None):  # type: ignore[no-untyped-def]
    """Convert the Kineto trace(s) at ``spec`` to ETs in memory, as a :class:`etkit.model.job.Job` (what
    ``analyze``, ``report``, ``timeline`` and ``diff`` do with a Kineto input); ``ranks`` keeps only those
    ranks. Each rank's trace is the one ``etkit convert kineto`` writes, read back (the same bytes, decoded
    the same way), without the file. The job's process groups are the traces' own, also when the folder
    holds only some ranks of the job. The traces come back to this process, so under a remote executor (a
    Dask cluster) the ranks are converted in this machine's pool (:func:`etkit.executor.in_client`);
    ``etkit convert kineto`` to a shared folder runs them on the cluster."""
    from ..model.job import Job
    from .job import convert_ranks_in_memory

    local = in_client(executor or default_executor())  # the traces come back to this process
    reports, traces, groups = convert_ranks_in_memory(
        convert_kineto_rank_trace, [(k.rank, (str(k.path),)) for k in kineto_files(spec)], executor=local)
    wanted = [r.rank for r in reports if ranks is None or r.rank in ranks]
    if not wanted:
        raise UsageError(f"{spec}: no rank {ranks} among its ranks {[r.rank for r in reports]}")
    return Job({r: traces[r] for r in wanted}, groups, str(spec))


def default_prefix(spec: str | os.PathLike[str]) -> str:
    """The output prefix a Kineto trace or folder suggests: its name without the trace suffixes."""
    name = Path(str(spec).rstrip("/")).name
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        name = name.removesuffix(suffix)
    return name or "job"
