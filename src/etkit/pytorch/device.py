"""The device side of a linked rank: what each GPU activity becomes, and who waits for whom across streams.

Kineto records, besides kernels, copies and sets, the waits the CUDA runtime resolves on the device
(category ``cuda_sync``): a stream that waits for an event another stream recorded (``Stream Wait
Event``: ``cudaStreamWaitEvent``), and the host waiting for the device (``Event Sync``, ``Stream Sync``,
``Context Sync``: ``cudaEventSynchronize``, ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``). Each
names the stream it waits on and the correlation of the ``cudaEventRecord`` call that recorded the event.
The work waited for is the last activity on that stream launched before the record (for a device-wide
sync: the last one launched on every stream before the call). These waits become data dependencies: the
first activity the waiting stream runs after the ``cudaStreamWaitEvent`` call depends on it, and so does
the host call that waited (Lumos, https://arxiv.org/abs/2504.09307, rebuilds the same edges).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import field

import numpy as np

from ..format.schema import NodeType
from ..records import record
from .link import LinkedRank

__all__ = ["gpu_node_type", "MEMORY_CATEGORIES", "DeviceWaits", "device_waits", "STREAM_WAIT", "HOST_SYNCS"]

STREAM_WAIT = "Stream Wait Event"
HOST_SYNCS = frozenset({"Event Sync", "Stream Sync", "Context Sync"})


#: Categories of the GPU activities that are not kernels: copies and sets (memory nodes, see :func:`gpu_node_type`).
MEMORY_CATEGORIES = frozenset({"gpu_memcpy", "gpu_memset"})


def gpu_node_type(category: str, name: str) -> int:
    """Chakra node type of a GPU activity: compute for a kernel; a host-to-device copy loads (MEM_LOAD),
    every other copy and every set stores (MEM_STORE) device memory."""
    if category == "gpu_memcpy":
        return int(NodeType.MEM_LOAD_NODE if "HtoD" in name or "PtoD" in name else NodeType.MEM_STORE_NODE)
    if category == "gpu_memset":
        return int(NodeType.MEM_STORE_NODE)
    return int(NodeType.COMP_NODE)


@record
class DeviceWaits:
    """Cross-stream and host-device dependencies: the GPU activities (indices into ``linked.gpu``) that a
    GPU activity or a host op (index into the host ops) waited for."""

    gpu: dict[int, list[int]] = field(default_factory=dict)
    host: dict[int, list[int]] = field(default_factory=dict)
    count: int = 0


def device_waits(linked: LinkedRank) -> DeviceWaits:
    """The waits of ``linked`` (see the module docstring); empty without Kineto syncs."""
    kin = linked.kineto
    out = DeviceWaits()
    if kin is None or not len(kin.sync_ts) or not linked.gpu:
        return out
    launch_ts = {int(c): float(t) for c, t in zip(kin.launch_correlation.tolist(), kin.launch_ts.tolist()) if c >= 0}
    runtime_op = {int(kin.launch_correlation[j]): op for j, op in linked.runtime_rows.items()}
    # per stream: activities in launch order (their launch time, else their own start)
    streams: dict[int, tuple[list[float], list[int]]] = {}
    for g, act in sorted(enumerate(linked.gpu), key=lambda ga: (launch_ts.get(ga[1].correlation, ga[1].ts), ga[0])):
        times, acts = streams.setdefault(act.stream, ([], []))
        times.append(launch_ts.get(act.correlation, act.ts))
        acts.append(g)

    def last_before(stream: int, t: float) -> int:
        times, acts = streams.get(stream, ((), ()))
        k = bisect_right(times, t) - 1  # type: ignore[arg-type]
        return acts[k] if k >= 0 else -1

    names = kin.names
    for s in range(len(kin.sync_ts)):
        kind = names[int(kin.sync_name[s])]
        call = launch_ts.get(int(kin.sync_correlation[s]))
        if call is None:
            continue
        record = launch_ts.get(int(kin.sync_wait_corr[s]))
        wait_stream = int(kin.sync_wait_stream[s])
        if record is not None and wait_stream >= 0:
            producers = [last_before(wait_stream, record)]
        elif kind == "Context Sync" or (kind in HOST_SYNCS and wait_stream < 0 and record is None):
            producers = [last_before(stream, call) for stream in streams]
        else:
            continue
        producers = [p for p in producers if p >= 0]
        if not producers:
            continue
        if kind == STREAM_WAIT:
            stream = int(kin.sync_stream[s])
            times, acts = streams.get(stream, ([], []))
            k = bisect_right(times, call)  # type: ignore[arg-type]
            if k < len(acts):
                out.gpu.setdefault(acts[k], []).extend(p for p in producers if p != acts[k])
                out.count += 1
        else:
            op = runtime_op.get(int(kin.sync_correlation[s]))
            if op is not None:
                out.host.setdefault(op, []).extend(producers)
                out.count += 1
    return out


def launch_times(linked: LinkedRank) -> np.ndarray:
    """Per GPU activity, the Kineto time (µs) of the call that launched it (NaN: not in the trace)."""
    kin = linked.kineto
    out = np.full(len(linked.gpu), np.nan)
    if kin is None:
        return out
    launch_ts = {int(c): float(t) for c, t in zip(kin.launch_correlation.tolist(), kin.launch_ts.tolist()) if c >= 0}
    for g, act in enumerate(linked.gpu):
        out[g] = launch_ts.get(act.correlation, np.nan)
    return out
