"""Independent readings of raw PyTorch traces, for checking converter output against its input.

Written from pytorch-traces.md §5 with plain ``json``: nothing here uses etkit's own parsing.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

#: c10d dispatcher op -> (Chakra kind, index of the argument holding the bytes each rank sends).
C10D = {
    "c10d::allreduce_": ("ALL_REDUCE", 0),
    "c10d::broadcast_": ("BROADCAST", 0),
    "c10d::reduce_": ("REDUCE", 0),
    "c10d::allgather_": ("ALL_GATHER", 1),
    "c10d::_allgather_base_": ("ALL_GATHER", 1),
    "c10d::allgather_into_tensor_coalesced_": ("ALL_GATHER", 1),
    "c10d::reduce_scatter_": ("REDUCE_SCATTER", 1),
    "c10d::_reduce_scatter_base_": ("REDUCE_SCATTER", 1),
    "c10d::reduce_scatter_tensor_coalesced_": ("REDUCE_SCATTER", 1),
    "c10d::alltoall_": ("ALL_TO_ALL", 1),
    "c10d::alltoall_base_": ("ALL_TO_ALL", 1),
    "c10d::gather_": ("GATHER", 1),
    "c10d::scatter_": ("SCATTER", 0),
    "c10d::barrier": ("BARRIER", None),
    "c10d::send": ("SEND", 0),
    "c10d::recv_": ("RECV", 0),
}


def load_json(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def nbytes(value: Any) -> int:
    """Sum of numel*itemsize over every [tid, sid, off, numel, itemsize, device] tensor in ``value``."""
    if isinstance(value, list) and len(value) == 6 and isinstance(value[5], str) and all(
            isinstance(v, int) for v in value[:5]):
        return value[3] * value[4]
    if isinstance(value, list):
        return sum(nbytes(v) for v in value)
    return 0


def host_collectives(path: Path) -> list[dict[str, Any]]:
    """Every c10d collective / p2p call in a host trace, in rf_id (issue) order."""
    calls = []
    for node in load_json(path)["nodes"]:
        spec = C10D.get(node["name"])
        if spec is None:
            continue
        kind, arg = spec
        values = node["inputs"]["values"]
        attrs = {a["name"]: a["value"] for a in node.get("attrs", [])}
        call = {"kind": kind, "bytes": 0 if arg is None else nbytes(values[arg]), "rf_id": attrs.get("rf_id", 0)}
        if kind in ("SEND", "RECV"):
            call["peer"], call["tag"] = values[2], values[3]
        calls.append(call)
    calls.sort(key=lambda c: c["rf_id"])
    return calls


def kineto_collective_count(path: Path) -> Counter:
    """c10d ops in a Kineto trace, by name (a second, independent count of what the job issued)."""
    events = load_json(path)["traceEvents"]
    return Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("name") in C10D)


def rank_files(job: Path) -> dict[int, tuple[Path, Path | None]]:
    out = {}
    for p in job.iterdir():
        m = re.match(r"rank-(\d+)\.et\.json(\.gz)?$", p.name)
        if m:
            r = int(m.group(1))
            kin = [k for k in job.iterdir() if re.match(rf"rank-{r}\.kineto\.json(\.gz)?$", k.name)]
            out[r] = (p, kin[0] if kin else None)
    return dict(sorted(out.items()))


def stream_order_breaks(trace: Any) -> tuple[int, list[tuple[str, str]]]:
    """Of a converted ET's GPU activity (every node on a stream but the GPU-side user annotations): how many
    nodes follow another on their stream, and the ``(previous, node)`` names of those that do not depend
    directly on the node before them there (start order, then duration)."""
    import numpy as np

    from etkit.format.attrs import PROFILER_CATEGORIES
    from etkit.model.trace import MISSING

    on = np.flatnonzero((trace.stream != MISSING) & (trace.cat != PROFILER_CATEGORIES.index("gpu_user_annotation")))
    pairs, breaks = 0, []
    for stream in np.unique(trace.stream[on]).tolist():
        rows = on[trace.stream[on] == stream]
        rows = rows[np.lexsort((trace.dur_ns[rows], trace.ts_ns[rows]))]
        for prev, row in zip(rows[:-1].tolist(), rows[1:].tolist()):
            pairs += 1
            if int(trace.ids[prev]) not in {int(d) for d in trace.deps_of(row)}:
                breaks.append((trace.name(prev), trace.name(row)))
    return pairs, breaks
