"""Serving figures of a schedule of an LLM serving run (``etkit generate llm-serve``): per request, time to first
token (TTFT), time per output token (TPOT) and end-to-end latency; throughput and goodput under SLOs.

The serving ETs name their requests (:mod:`etkit.generate.serve`): an arrival node ``serve.arrive.r<id>``
per request (attributes ``serve_request``, ``serve_prompt``, ``serve_output``) that ends at its arrival,
and on the node where an engine step's tokens come out, ``serve_first`` (requests whose first token it
produces) and ``serve_done`` (requests it completes). With a schedule of those nodes (a simulation's):

- TTFT = end of the node producing the first token - end of the arrival node;
- TPOT = (end of the completing node - end of the first-token node) / (output tokens - 1), for requests of
  two tokens or more (DistServe's and vLLM's definition: the mean gap between output tokens);
- latency = end of the completing node - arrival;
- throughput = output tokens / (last completion - first arrival), also per second of prompt tokens;
- goodput = requests per second that meet both SLOs (``slo_ttft_ms``, ``slo_tpot_ms``; an absent SLO is
  met by every request), with the share of requests that meet them (SLO attainment).

Percentiles are numpy's linear-interpolation ones.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING

import numpy as np

from ..arrays import percentile
from ..errors import EtkitError
from ..format.attrs import attr_value, find_attr
from ..format.stream import open_trace
from ..model.job import Job, discover
from ..model.schedule import Schedule
from ..model.trace import Trace, load_trace
from ..records import record

if TYPE_CHECKING:
    from ..format.schema import GlobalMetadata

__all__ = ["RequestTimes", "ServingMetrics", "serving_metrics", "is_serving_trace", "PERCENTILES"]

PERCENTILES = (50, 90, 99)
_MARKERS = (b"serve_request", b"serve_first", b"serve_done")


@record(frozen=True)
class RequestTimes:
    """One request's times in ns (``first_ns``/``done_ns`` NaN when the schedule never produced them)."""

    id: int
    prompt: int
    output: int
    arrival_ns: float
    first_ns: float
    done_ns: float

    @property
    def ttft_ns(self) -> float:
        return self.first_ns - self.arrival_ns

    @property
    def tpot_ns(self) -> float:
        return (self.done_ns - self.first_ns) / (self.output - 1) if self.output > 1 else float("nan")

    @property
    def latency_ns(self) -> float:
        return self.done_ns - self.arrival_ns


@record
class ServingMetrics:
    """What serving engineers ask of a run (see the module docstring for the definitions)."""

    requests: list[RequestTimes]
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    notes: list[str] = field(default_factory=list)

    def _array(self, what: str) -> np.ndarray:
        return np.asarray([getattr(r, what) for r in self.requests], dtype=np.float64)

    @property
    def completed(self) -> int:
        return int(np.isfinite(self._array("done_ns")).sum())

    @property
    def span_ns(self) -> float:
        done, arrival = self._array("done_ns"), self._array("arrival_ns")
        finished = np.isfinite(done)
        return float(done[finished].max() - arrival.min()) if finished.any() else 0.0

    def percentiles(self, what: str) -> dict[int, float]:
        """``{50: p50, 90: p90, 99: p99}`` of ``ttft_ns``, ``tpot_ns`` or ``latency_ns`` (ms; NaN when none)."""
        values = self._array(what)
        values = values[np.isfinite(values)] / 1e6
        return {p: percentile(values, p) if len(values) else float("nan") for p in PERCENTILES}

    def mean(self, what: str) -> float:
        values = self._array(what)
        values = values[np.isfinite(values)] / 1e6
        return float(values.mean()) if len(values) else float("nan")

    @property
    def throughput_tokens_s(self) -> float:
        """Output tokens per second of the run."""
        span = self.span_ns
        done = sum(r.output for r in self.requests if np.isfinite(r.done_ns))
        return done / (span / 1e9) if span > 0 else 0.0

    @property
    def prompt_tokens_s(self) -> float:
        span = self.span_ns
        return sum(r.prompt for r in self.requests if np.isfinite(r.first_ns)) / (span / 1e9) if span > 0 else 0.0

    def meets_slo(self, r: RequestTimes) -> bool:
        if not np.isfinite(r.done_ns):
            return False
        ok = self.slo_ttft_ms is None or r.ttft_ns <= self.slo_ttft_ms * 1e6
        if self.slo_tpot_ms is not None and r.output > 1:
            ok = ok and r.tpot_ns <= self.slo_tpot_ms * 1e6
        return bool(ok)

    @property
    def attainment(self) -> float:
        """Share of requests that meet the SLOs (all of them when no SLO is set, if they complete)."""
        return sum(self.meets_slo(r) for r in self.requests) / len(self.requests) if self.requests else 0.0

    @property
    def goodput_rps(self) -> float:
        """Requests per second that meet the SLOs."""
        span = self.span_ns
        return sum(self.meets_slo(r) for r in self.requests) / (span / 1e9) if span > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "requests": len(self.requests), "completed": self.completed, "span_ms": self.span_ns / 1e6,
            "ttft_ms": self.percentiles("ttft_ns") | {"mean": self.mean("ttft_ns")},
            "tpot_ms": self.percentiles("tpot_ns") | {"mean": self.mean("tpot_ns")},
            "latency_ms": self.percentiles("latency_ns") | {"mean": self.mean("latency_ns")},
            "throughput_tokens_s": self.throughput_tokens_s, "prompt_tokens_s": self.prompt_tokens_s,
            "slo_ttft_ms": self.slo_ttft_ms, "slo_tpot_ms": self.slo_tpot_ms,
            "slo_attainment": self.attainment, "goodput_rps": self.goodput_rps, "notes": self.notes,
        }

    def lines(self) -> list[str]:
        def row(label: str, what: str) -> str:
            p = self.percentiles(what)
            return (f"{label:<16} {self.mean(what):>10,.2f} {p[50]:>10,.2f} {p[90]:>10,.2f} {p[99]:>10,.2f}")

        out = [f"serving: {len(self.requests):,} requests, {self.completed:,} completed in {self.span_ns / 1e9:,.3f} s",
               f"{'(ms)':<16} {'mean':>10} {'p50':>10} {'p90':>10} {'p99':>10}",
               row("TTFT", "ttft_ns"), row("TPOT", "tpot_ns"), row("latency", "latency_ns"),
               f"throughput {self.throughput_tokens_s:,.1f} output tokens/s, {self.prompt_tokens_s:,.1f} prompt tokens/s"]
        slos = [f"TTFT <= {self.slo_ttft_ms:g} ms" for _ in [0] if self.slo_ttft_ms is not None]
        slos += [f"TPOT <= {self.slo_tpot_ms:g} ms" for _ in [0] if self.slo_tpot_ms is not None]
        out.append(f"goodput {self.goodput_rps:,.3f} requests/s meeting {' and '.join(slos) or 'no SLO'} "
                   f"({self.attainment:.1%} of requests)")
        return out + [f"note: {n}" for n in self.notes]


def is_serving_trace(trace: Trace) -> bool:
    """Whether ``trace`` was written by the serving generator (its GlobalMetadata says ``workload=llm-serve``)."""
    found = find_attr(trace.metadata.attr, "workload")
    return found is not None and attr_value(found) == "llm-serve"


def serving_metrics(job: Job | str | os.PathLike[str] | Sequence[str], schedule: Schedule, *,
                    slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None) -> ServingMetrics:
    """Per-request times and the run's figures from ``schedule`` (a simulation of ``job``, or its own times).

    Only the first tensor-parallel rank of each instance and stage is read (its peers hold the same graph).
    """
    traces = _head_traces(job)
    arrivals: dict[int, tuple[float, int, int]] = {}
    first: dict[int, float] = {}
    done: dict[int, float] = {}
    for rank, trace in traces.items():
        if rank not in schedule.ranks:
            raise EtkitError(f"rank {rank}: the schedule has no times for it")
        end = schedule.ranks[rank].end_ns
        ran = schedule.ranks[rank].ran
        if len(end) != len(trace):
            raise EtkitError(f"rank {rank}: the schedule has {len(end)} rows, the trace {len(trace)} nodes")
        for row in _marked_rows(trace):
            node = trace.node(row)
            at = float(end[row]) if ran[row] else float("nan")
            request = find_attr(node.attr, "serve_request")
            if request is not None:
                prompt, output = find_attr(node.attr, "serve_prompt"), find_attr(node.attr, "serve_output")
                arrivals[int(attr_value(request))] = (at, int(attr_value(prompt) or 0), int(attr_value(output) or 0))
            for name, into in (("serve_first", first), ("serve_done", done)):
                found = find_attr(node.attr, name)
                if found is not None:
                    for rid in attr_value(found):
                        into[int(rid)] = min(at, into.get(int(rid), float("inf")))
    if not arrivals:
        raise EtkitError("no serving requests in this job (it was not written by `etkit generate llm-serve`)")
    times = [RequestTimes(rid, p, o, a, first.get(rid, float("nan")), done.get(rid, float("nan")))
             for rid, (a, p, o) in sorted(arrivals.items())]
    metrics = ServingMetrics(times, slo_ttft_ms, slo_tpot_ms)
    missing = len(times) - metrics.completed
    if missing:
        metrics.notes.append(f"{missing} request(s) did not complete in this schedule")
    return metrics


def _marked_rows(trace: Trace) -> list[int]:
    """Rows whose record carries a serving attribute (found in the record bytes, parsed only then)."""
    blob, off, length = trace.blob, trace.rec_off, trace.rec_len
    out = []
    for row in range(len(trace)):
        record = blob[int(off[row]):int(off[row]) + int(length[row])]
        if any(marker in record for marker in _MARKERS):
            out.append(row)
    return out


def _head_traces(job: Job | str | os.PathLike[str] | Sequence[str]) -> dict[int, Trace]:
    """The first rank of each (instance, stage) of a serving job, as traces with their record bytes
    (files: only those ranks are loaded; the others' GlobalMetadata is read and their nodes skipped)."""
    if isinstance(job, Job):
        items = [(rank, trace.metadata, lambda t=trace: t) for rank, trace in sorted(job.traces.items())]
    else:
        files, _ = discover(job)
        items = []
        for f in sorted(files, key=lambda f: f.rank):
            with open_trace(f.path) as reader:
                metadata = reader.metadata
            items.append((f.rank, metadata, lambda p=f.path: load_trace(p)))
    out: dict[int, Trace] = {}
    seen: set[tuple[object, object]] = set()
    for rank, metadata, load in items:
        key = _position(metadata)
        if key not in seen:
            seen.add(key)
            out[rank] = load()
    return out


def _position(metadata: GlobalMetadata) -> tuple[object, object]:
    attrs = metadata.attr
    inst, stage = find_attr(attrs, "instance"), find_attr(attrs, "stage")
    return (attr_value(inst) if inst else None, attr_value(stage) if stage else None)

