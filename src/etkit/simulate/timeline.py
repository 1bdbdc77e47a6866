"""A simulated schedule as a Chrome/Perfetto trace (``--timeline OUT.trace.json``): one process per
rank, one thread per resource (CPU, compute, comm, memory), one complete event per node."""

from __future__ import annotations

import os

import numpy as np
import orjson

from ..fileio import atomic_output
from ..model.job import Job
from ..model.schedule import Schedule

__all__ = ["write_timeline"]

_RESOURCE_NAMES = ("cpu", "compute", "comm", "memory")


def write_timeline(job: Job, schedule: Schedule, path: str | os.PathLike[str]) -> int:
    """Write the timeline; returns the number of events written."""
    events: list[dict] = []
    for rank, sched in sorted(schedule.ranks.items()):
        trace = job.traces[rank]
        events.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}})
        for tid, name in enumerate(_RESOURCE_NAMES):
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": name}})
        rows = np.flatnonzero(sched.ran)
        starts = (sched.start_ns[rows] / 1000.0).tolist()
        durs = ((sched.end_ns[rows] - sched.start_ns[rows]) / 1000.0).tolist()
        res = (sched.resource[rows] if sched.resource is not None else np.ones(len(rows), np.int8)).tolist()
        names = trace.strings
        name_idx = trace.name_idx[rows].tolist()
        ids = trace.ids[rows].tolist()
        for i in range(len(rows)):
            events.append({"ph": "X", "pid": rank, "tid": res[i], "ts": starts[i], "dur": durs[i],
                           "name": names[name_idx[i]], "args": {"id": ids[i]}})
    with atomic_output(path) as out:
        out.write(orjson.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))
    return len(events)
