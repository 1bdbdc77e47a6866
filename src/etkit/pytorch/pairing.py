"""Which host execution trace goes with which Kineto trace, and which rank each pair is: from the files' contents.

Real jobs name their files their own way (param's DLRM: ``dlrm_eg_<r>.json`` + ``worker<r>_step_12.<ts>.pt.trace.json``;
ours: ``rank-<r>.et.json`` + ``rank-<r>.kineto.json``), so names are the last resort. A pair is found by

1. the process id: the host trace's ``pid`` is the pid of its Kineto trace's CPU events (one process per rank);
   several Kineto traces with that pid (ranks on different hosts) are told apart by rank;
2. the rank: ``distributedInfo.rank`` in the Kineto trace, and in the host trace the rank its
   ``process_group:init`` record implies (the one rank in all of its explicit groups) or its
   ``record_param_comms`` records (the rank argument on the default group);
3. the number in the file names that tells the files apart (``dlrm_eg_3`` and ``worker3_step_12``).

Each pair's rank is the Kineto trace's, else the host trace's, else the name's, and the job is checked to be one
run: every Kineto trace agrees on the world size, no rank has two files, and the host traces' start times lie
within :data:`SAME_RUN_S` of each other; otherwise the job is refused, naming the files. Only the head of each
file is read, except when a host trace's rank is needed and its head does not tell.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from ..errors import UsageError
from ..filekind import HEAD_BYTES, read_head, sniff
from ..records import record

__all__ = ["HostInfo", "KinetoInfo", "Pairing", "host_info", "kineto_info", "pair_traces", "expand_paths",
           "job_files", "check_pair", "SAME_RUN_S"]

#: Host traces whose recorded start times lie further apart than this come from different runs: the ranks of
#: one job start profiling at the same step, held together by their collectives.
SAME_RUN_S = 600.0
_CPU_PID = re.compile(rb'"cat"\s*:\s*"(?:cpu_op|user_annotation|python_function|cuda_runtime)"[^{}]*?"pid"\s*:\s*(\d+)')


# (the patterns of pairing host traces are compiled on first use: a Kineto trace's kineto_info needs none of them)
@cache
def _pg_init() -> re.Pattern[bytes]:
    return re.compile(rb'"name"\s*:\s*"## process_group:init ##"')


@cache
def _values() -> re.Pattern[bytes]:
    return re.compile(rb'"values"\s*:\s*\[\s*("(?:[^"\\]|\\.)*")')


@cache
def _number() -> re.Pattern[str]:
    return re.compile(r"\d+")


@record(frozen=True)
class HostInfo:
    """What a host execution trace says about where it comes from."""

    path: Path
    pid: int | None
    time: str  # wall-clock start, "YYYY-MM-DD HH:MM:SS"
    rank: int | None
    world: int | None
    rank_from: str = ""  # "process_group:init" or "record_param_comms"


@record(frozen=True)
class KinetoInfo:
    """What a Kineto trace says about where it comes from."""

    path: Path
    pid: int | None
    rank: int | None
    world: int | None
    host_name: str = ""


@record(frozen=True)
class Pairing:
    """One rank's files and how they were found to belong together."""

    rank: int
    host: Path
    kineto: Path | None
    how: str  # e.g. "pid 23221, rank from distributedInfo"

    def line(self) -> str:
        with_kineto = f" + {self.kineto.name}" if self.kineto is not None else " (no Kineto trace)"
        return f"rank {self.rank}: {self.host.name}{with_kineto} ({self.how})"

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": str(self.host), "kineto": str(self.kineto) if self.kineto else None,
                "how": self.how}


def _int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _groups_rank(groups: Any) -> tuple[int | None, int | None]:
    """(rank, world) a ``process_group:init`` payload implies: the one rank in every explicit group, the default
    group's size."""
    if not isinstance(groups, list):
        return None, None
    common: set[int] | None = None
    world = None
    for g in groups:
        if not isinstance(g, dict):
            continue
        ranks: list[Any] = g["ranks"] if isinstance(g.get("ranks"), list) else []
        if str(g.get("pg_name")) == "0" or g.get("pg_desc") == "default_pg":
            world = _int(g.get("group_size")) or (len(ranks) or None)
        elif ranks:
            members = {r for r in ranks if _int(r) is not None}
            common = members if common is None else common & members
    rank = next(iter(common)) if common is not None and len(common) == 1 else None
    return rank, world


def _pg_init_rank(head: bytes) -> tuple[int | None, int | None]:
    m = _pg_init().search(head)
    if m is None:
        return None, None
    v = _values().search(head, m.end(), m.end() + 4096)
    if v is None:
        return None, None
    try:
        return _groups_rank(orjson.loads(orjson.loads(v.group(1))))
    except orjson.JSONDecodeError:
        return None, None


def _param_comms_rank(nodes: Iterable[Any]) -> tuple[int | None, int | None]:
    """(rank, world) from ``record_param_comms`` on the default group: inputs ``[..., seq, (pg_name, pg_desc),
    rank, collective, in_splits, out_splits, global_rank_start, global_rank_stride, world_size]``."""
    for node in nodes:
        if not isinstance(node, dict) or node.get("name") != "record_param_comms":
            continue
        values = (node.get("inputs") or {}).get("values")
        if not isinstance(values, list) or len(values) < 10:
            continue
        pg = values[-8] if isinstance(values[-8], list) else []
        if pg and str(pg[0]) not in ("0", "default_pg") and (len(pg) < 2 or pg[1] != "default_pg"):
            continue
        rank, world = _int(values[-7]), _int(values[-1])
        if rank is not None:
            return rank, world
    return None, None


def host_info(path: str | os.PathLike[str], *, full: bool = False) -> HostInfo:
    """Identity of a host trace from its header (and, with ``full`` or when its head does not tell the rank
    and ``full`` is None, its ``record_param_comms`` records)."""
    p = Path(path)
    head = read_head(p)
    header: dict[str, Any] = {}
    for key in (b"pid", b"time"):
        m = re.search(rb'"' + key + rb'"\s*:\s*("(?:[^"\\]|\\.)*"|\d+)', head[:4096])
        if m is not None:
            header[key.decode()] = orjson.loads(m.group(1))
    rank, world = _pg_init_rank(head)
    rank_from = "process_group:init" if rank is not None else ""
    if rank is None and full:
        from ..fileio import read_bytes_maybe_gzip

        try:
            data = orjson.loads(read_bytes_maybe_gzip(p))
        except orjson.JSONDecodeError:
            data = {}
        nodes = data.get("nodes", []) if isinstance(data, dict) else []
        rank, w = _param_comms_rank(nodes)
        world = world or w
        rank_from = "record_param_comms" if rank is not None else ""
    return HostInfo(p, _int(header.get("pid")), str(header.get("time") or ""), rank, world, rank_from)


def kineto_info(path: str | os.PathLike[str]) -> KinetoInfo:
    """Identity of a Kineto trace from its head: ``distributedInfo`` and the pid of its CPU events."""
    p = Path(path)
    head = read_head(p)
    dist: dict[str, Any] = {}
    m = re.search(rb'"distributedInfo"\s*:\s*', head)
    if m is not None:
        try:
            import json

            dist, _ = json.JSONDecoder().raw_decode(head[m.end():].decode("utf-8", "replace"))
        except ValueError:
            dist = {}
    pid = _CPU_PID.search(head)
    name = re.search(rb'"host_name"\s*:\s*"((?:[^"\\]|\\.)*)"', head[:HEAD_BYTES])
    dist = dist if isinstance(dist, dict) else {}
    return KinetoInfo(p, int(pid.group(1)) if pid else None, _int(dist.get("rank")), _int(dist.get("world_size")),
                      name.group(1).decode("utf-8", "replace") if name else "")


def expand_paths(patterns: Sequence[str | os.PathLike[str]], what: str) -> list[Path]:
    """Files named by ``patterns`` (paths or glob patterns such as ``'dlrm_eg_*.json'``), sorted, each once."""
    out: dict[Path, None] = {}
    for pattern in patterns:
        text = str(pattern)
        matches = sorted(glob.glob(text)) if glob.has_magic(text) else [text]
        if not matches:
            raise UsageError(f"{what} {text!r} matches no file")
        for m in matches:
            if not Path(m).is_file():
                raise UsageError(f"{m}: no such file ({what})")
            out.setdefault(Path(m), None)
    return list(out)


def job_files(job_dir: str | os.PathLike[str]) -> tuple[list[Path], list[Path]]:
    """The host and Kineto traces in ``job_dir``, told apart by content (whatever their names)."""
    root = Path(job_dir)
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    hosts, kinetos = [], []
    for path in sorted(root.iterdir()):
        if path.is_file() and re.search(r"\.json(\.gz)?$", path.name):
            kind = sniff(path).name
            if kind in ("host-et", "linked"):
                hosts.append(path)
            elif kind == "kineto":
                kinetos.append(path)
    if not hosts:
        raise UsageError(f"{root}: no host trace found (no PyTorch host execution trace among its .json[.gz] files, "
                         "e.g. rank-<r>.et.json or host.<r>.json)")
    return hosts, kinetos


def check_pair(host: str | os.PathLike[str], kineto: str | os.PathLike[str] | None) -> None:
    """A clear error when ``host`` is not a host trace or ``kineto`` not a Kineto trace (e.g. swapped)."""
    from ..filekind import require

    require(host, {"host-et", "linked"}, wanted="a PyTorch host execution trace")
    if kineto is not None:
        require(kineto, {"kineto"}, wanted="a Kineto trace")


def _name_numbers(paths: Sequence[Path]) -> dict[Path, int] | None:
    """The number in each name that tells the files apart (the first position where the numbers differ), or
    None when the names do not give every file its own number."""
    numbers = {p: [int(x) for x in _number().findall(p.name)] for p in paths}
    if len(paths) == 1:
        nums = next(iter(numbers.values()))
        return {paths[0]: nums[0]} if len(nums) == 1 else None
    lengths = {len(v) for v in numbers.values()}
    for i in range(min(lengths, default=0)):
        column = {p: v[i] for p, v in numbers.items()}
        if len(set(column.values())) == len(paths):
            return column
    return None


@record
class _Job:
    hosts: list[HostInfo]
    kinetos: list[KinetoInfo]
    pairs: list[tuple[HostInfo, KinetoInfo | None, str]] = field(default_factory=list)


def _pair(job: _Job) -> None:
    free = list(job.kinetos)
    todo = []
    for h in job.hosts:  # 1. by pid (and rank where several Kineto traces share it)
        same = [k for k in free if h.pid is not None and k.pid == h.pid]
        if len(same) > 1 and h.rank is not None:
            same = [k for k in same if k.rank == h.rank]
        if len(same) == 1:
            job.pairs.append((h, same[0], f"pid {h.pid}"))
            free.remove(same[0])
        else:
            todo.append(h)
    rest = []
    for h in todo:  # 2. by rank
        same = [k for k in free if h.rank is not None and k.rank == h.rank]
        if len(same) == 1:
            job.pairs.append((h, same[0], f"rank {h.rank} in both"))
            free.remove(same[0])
        else:
            rest.append(h)
    if rest and free:  # 3. by the number in the names
        host_nums, kineto_nums = _name_numbers([h.path for h in rest]), _name_numbers([k.path for k in free])
        if host_nums is not None and kineto_nums is not None:
            by_num = {kineto_nums[k.path]: k for k in free}
            for h in list(rest):
                k = by_num.get(host_nums[h.path])
                if k is not None:
                    job.pairs.append((h, k, f"number {host_nums[h.path]} in both names"))
                    free.remove(k)
                    rest.remove(h)
    if free:
        k = free[0]
        detail = ", ".join(x for x in (f"pid {k.pid}" if k.pid is not None else "",
                                       f"rank {k.rank}" if k.rank is not None else "") if x)
        raise UsageError(f"{k.path}: no host trace of this Kineto trace was found ({detail or 'no pid or rank in it'}; "
                         f"host traces: {', '.join(h.path.name for h in job.hosts)})")
    job.pairs.extend((h, None, "host trace alone") for h in rest)


def _ranks(job: _Job) -> list[Pairing]:
    names = _name_numbers([h.path for h, _, _ in job.pairs]) if job.pairs else None
    out = []
    for i, (h, k, how) in enumerate(sorted(job.pairs, key=lambda p: str(p[0].path))):
        if k is not None and k.rank is not None and h.rank is not None and k.rank != h.rank:
            raise UsageError(f"{h.path} is rank {h.rank} (its {h.rank_from}) but {k.path}, paired with it by {how}, "
                             f"is rank {k.rank}: not the same process")
        if k is not None and k.rank is not None:
            rank, source = k.rank, "rank from distributedInfo"
        elif h.rank is not None:
            rank, source = h.rank, f"rank from {h.rank_from}"
        elif len(job.pairs) == 1:
            rank, source = 0, "the job's only rank"
        elif names is not None:
            rank, source = names[h.path], "rank from the file name"
        else:
            rank, source = i, "rank from the order of the names"
        out.append(Pairing(rank, h.path, k.path if k else None, f"{how}; {source}" if k else source))
    return sorted(out, key=lambda p: p.rank)


def _one_run(job: _Job, pairs: list[Pairing]) -> None:
    """Refuse a job whose files come from different runs, naming them."""
    by_rank: dict[int, Pairing] = {}
    for p in pairs:
        if p.rank in by_rank:
            raise UsageError(f"rank {p.rank} has two host traces, {by_rank[p.rank].host} and {p.host}: files of "
                             "different runs (or of different jobs) in one place?")
        by_rank[p.rank] = p
    worlds: dict[int, list[Path]] = {}
    for k in job.kinetos:
        if k.world is not None:
            worlds.setdefault(k.world, []).append(k.path)
    for h in job.hosts:
        if h.world is not None:
            worlds.setdefault(h.world, []).append(h.path)
    if len(worlds) > 1:
        parts = "; ".join(f"{', '.join(p.name for p in paths[:4])}{' ...' if len(paths) > 4 else ''} say {w} ranks"
                          for w, paths in sorted(worlds.items()))
        raise UsageError(f"{pairs[0].host.parent}: the traces come from different runs ({parts}): convert the files "
                         "of one run (an earlier, bigger run's files left beside a new one?)")
    if worlds:
        world = next(iter(worlds))
        beyond = [p for p in pairs if p.rank >= world]
        if beyond:
            raise UsageError(f"{beyond[0].host}: rank {beyond[0].rank} of a job whose traces say {world} ranks: "
                             "files of another run?")
    stamps = []
    for h in job.hosts:
        try:
            stamps.append((datetime.strptime(h.time, "%Y-%m-%d %H:%M:%S"), h.path))
        except ValueError:
            continue
    if len(stamps) > 1:
        stamps.sort()
        median = stamps[len(stamps) // 2][0]
        far = [(t, p) for t, p in stamps if abs((t - median).total_seconds()) > SAME_RUN_S]
        if far:
            t, path = far[0]
            raise UsageError(f"{path} was recorded at {t:%Y-%m-%d %H:%M:%S} but the other ranks around "
                             f"{median:%Y-%m-%d %H:%M:%S}: files of different runs; convert the files of one run")


def pair_traces(hosts: Sequence[str | os.PathLike[str]], kinetos: Sequence[str | os.PathLike[str]] = ()) -> list[Pairing]:
    """Every rank's (host, Kineto) files, paired and ranked by their contents (see the module docstring)."""
    if not hosts:
        raise UsageError("no host trace given")
    for h in hosts:
        check_pair(h, None)
    for k in kinetos:
        check_pair(hosts[0], k)
    kinfo = [kineto_info(k) for k in kinetos]
    # a host trace's records are read only when its head did not tell its rank and the pids do not settle it
    pids = [k.pid for k in kinfo]
    hinfo = []
    for h in hosts:
        info = host_info(h)
        if info.rank is None and (info.pid is None or pids.count(info.pid) != 1):
            info = host_info(h, full=True)
        hinfo.append(info)
    job = _Job(hinfo, kinfo)
    _pair(job)
    pairs = _ranks(job)
    _one_run(job, pairs)
    return pairs
