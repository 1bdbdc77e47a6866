"""``etkit anonymize``: a job that can be shared outside the company that traced it.

``anonymize(prefix, out)`` removes what identifies the model and its owner and keeps what simulators and
analyses need (the policy, :mod:`etkit.anonymize.policy`, says exactly what; its default is written down
in :data:`~etkit.anonymize.policy.DEFAULT_POLICY_TEXT`):

- node names become their class (``aten::mm`` -> ``gemm``, with its FLOPs as ``num_ops`` when the trace
  lacks them; collectives their ``CommType``); Python frames, module paths, file names, kernel names with
  template arguments go with them; PyTorch's ``ProfilerStep#N`` markers stay (the tools find steps by them);
- attributes other than the numbers the tools read go (``op_schema``, ``rf_id``, ...); string arguments
  and tensor values go; tensor and storage ids are renumbered per rank; shapes are kept, bucketed or
  dropped;
- process groups are renumbered (``"0"`` stays every rank); timestamps are shifted so the job starts at
  1 us; durations are kept or jittered (each rank's clock, so that no event changes order); comm sizes
  kept or rounded to powers of two; GlobalMetadata keeps its version only.

Ranks are streamed one executor task at a time (a survey pass, then a rewrite pass), the job is written
aside and swapped in (:func:`etkit.fileio.job_output`). Then the proof: every text string
of the input (node names, attribute strings, the strings inside IOInfo, metadata, group names and
descriptions, the input's file paths) of 4 characters or more is searched in every output byte
(:mod:`etkit.anonymize.leaks`; each rank's rewrite task searches the bytes it wrote for its own strings
and the paths and group names, and a scan pass searches each output for the other ranks' strings, where
there are any), and the output is validated. :func:`compare_jobs` adds the simulator's and
the analyses' view: identical results with durations and sizes kept, within the jitter otherwise.
"""

from __future__ import annotations

import os
import time
from dataclasses import field
from pathlib import Path

from ..executor import Executor, default_executor
from ..fileio import comm_groups_path, job_files, job_output, protect_inputs, rank_file_path, read_bytes_maybe_gzip
from ..model.groups import WORLD, ProcessGroups
from ..model.job import Job, discover, load_groups
from ..records import record
from .ioinfo import DEVICES
from .leaks import find_in_bytes, needle_index, text_strings
from .opclass import CLASSES
from .policy import DEFAULT_POLICY_TEXT, Policy, default_policy, load_policy
from .rank import VOCABULARY, RankTask, rewrite_rank, searched_strings, survey_rank

__all__ = ["anonymize", "AnonymizeReport", "Policy", "load_policy", "default_policy", "DEFAULT_POLICY_TEXT",
           "renumber_groups", "scan_outputs", "compare_jobs", "compare_views", "job_view", "JobView", "Comparison"]


@record
class AnonymizeReport:
    """What ``anonymize`` wrote and the proof that nothing of the input's text is in it."""

    source: str
    prefix: str
    ranks: int
    nodes: int
    files: list[str]
    seconds: float
    strings_checked: int  # input text strings searched in the output
    leaks: list[str]  # those found in some output byte (empty: the proof holds)
    vocabulary: list[str]  # input strings that are etkit's own words (class names, ...): not searched
    kept_by_policy: list[str]  # input strings the policy keeps on purpose (ProfilerStep#N, ...)
    valid: bool
    findings: list[str]
    groups: dict[str, str]  # old pg_name -> new
    tensors: int
    flops_derived: int
    max_jitter: float
    policy: Policy = field(default_factory=default_policy)

    @property
    def ok(self) -> bool:
        return not self.leaks and self.valid

    def lines(self) -> list[str]:
        out = [f"wrote {self.ranks} rank(s), {self.nodes:,} nodes to {self.prefix}.<rank>.et in {self.seconds:.2f} s "
               f"({self.nodes / max(self.seconds, 1e-9):,.0f} nodes/s)",
               f"process groups renumbered: {len(self.groups)}; tensors renumbered: {self.tensors:,}; "
               f"FLOPs derived from shapes: {self.flops_derived:,} node(s)"]
        if self.policy.jitter:
            out.append(f"durations jittered by up to {self.policy.jitter:.1%} (seed {self.policy.seed}; "
                       f"largest change {self.max_jitter:.2%})")
        leak = f"{len(self.leaks)} FOUND: " + ", ".join(repr(s) for s in self.leaks[:10]) if self.leaks else "none found"
        out.append(f"input strings (>= 4 characters, with a letter) searched in every output byte: "
                   f"{self.strings_checked:,}; {leak}")
        if self.kept_by_policy:
            out.append(f"kept on purpose by the policy: {len(self.kept_by_policy)} "
                       f"({', '.join(self.kept_by_policy[:4])}{', ...' if len(self.kept_by_policy) > 4 else ''})")
        if self.vocabulary:
            out.append(f"not searched, being etkit's own words: {', '.join(repr(s) for s in self.vocabulary[:8])}")
        out.append("validation: ok" if self.valid else f"validation: {len(self.findings)} finding(s): "
                   + "; ".join(self.findings[:3]))
        return out

    def to_json(self) -> dict:
        return {"source": self.source, "prefix": self.prefix, "ranks": self.ranks, "nodes": self.nodes,
                "files": self.files, "seconds": self.seconds, "strings_checked": self.strings_checked,
                "leaks": self.leaks, "vocabulary": self.vocabulary, "kept_by_policy": self.kept_by_policy,
                "valid": self.valid, "findings": self.findings, "groups": self.groups, "tensors": self.tensors,
                "flops_derived": self.flops_derived, "max_jitter": self.max_jitter, "ok": self.ok}


def renumber_groups(groups: ProcessGroups, used: set[str], world_size: int) -> dict[str, str]:
    """New names of every process group: "0" (and "") stay every rank; the others get 1, 2, ... ordered by
    their members (names in use but listed nowhere come last, in their own order), so no name survives."""
    out: dict[str, str] = {}
    listed = {name: tuple(groups.groups.get(name) or ()) for name in set(groups.groups) | used}
    everyone = tuple(range(world_size))
    order = sorted((n for n in listed if n not in ("", WORLD)),
                   key=lambda n: (n not in groups.groups, listed[n] or everyone, len(listed[n]), n))
    for name in ("", WORLD):
        if name in listed:
            out[name] = WORLD
    for i, name in enumerate(order, start=1):
        out[name] = str(i)
    return out


def _scan_task(item: tuple[str, object]) -> set[bytes]:
    path, index = item
    return find_in_bytes(read_bytes_maybe_gzip(path), index)  # type: ignore[arg-type]


def scan_outputs(paths: list[Path], strings: set[str], executor: Executor) -> set[str]:
    """Which of ``strings`` occur anywhere in the bytes of ``paths`` (one executor task per file)."""
    return _scan_each([(p, strings) for p in paths], executor)


def _scan_each(items: list[tuple[Path, set[str]]], executor: Executor) -> set[str]:
    """Which strings occur in the bytes of their file: each ``(path, strings)`` one executor task."""
    found: set[bytes] = set()
    for hits in executor.map(_scan_task, [(str(p), needle_index(s)) for p, s in items if s], desc="scan"):
        found |= hits
    return {s.decode("utf-8", "surrogatepass") for s in found}


def _path_strings(files: list[Path], prefix: str | None) -> set[str]:
    """The input's file paths, names and path components (they must not appear either)."""
    out: set[str] = set()
    for p in [*files, *([Path(prefix)] if prefix else [])]:
        out.update((str(p), str(p.resolve()), p.name))
        out.update(part for part in p.resolve().parts if part != "/")
    return out


def _vocabulary_text() -> str:
    return "\n".join((*CLASSES, *VOCABULARY, *DEVICES, *_ATTRIBUTE_WORDS))


#: Attribute names (schema words, not data) an output may hold.
_ATTRIBUTE_WORDS = ("is_cpu_op", "num_ops", "tensor_size", "comm_type", "comm_size", "comm_src", "comm_dst",
                    "comm_tag", "comm_priority", "pg_name", "involved_dim", "tid", "stream", "ts_ns", "dur_ns",
                    "comm_send", "comm_recv", "metadata", "mem_load", "mem_store", "invalid")


def anonymize(job_or_prefix: str | os.PathLike[str], out: str | os.PathLike[str], *, policy: Policy | None = None,
              comm_groups: str | os.PathLike[str] | None = None, executor: Executor | None = None) -> AnonymizeReport:
    """Write the anonymised job of ``job_or_prefix`` under the prefix ``out``; see the module docstring.

    ``policy`` defaults to :func:`default_policy` (``load_policy(path)`` reads a YAML file;
    ``policy.with_options(jitter=0.02, seed=1, shapes="bucket")`` changes some fields).
    """
    began = time.perf_counter()
    policy = policy or default_policy()
    files, prefix = discover(job_or_prefix)
    executor = executor or default_executor()
    inputs = [f.path for f in files] + (job_files(prefix) if prefix else [])
    with protect_inputs(inputs), job_output(out) as staged:  # an output over the input is refused here
        surveys = executor.map(survey_rank, [(f.rank, str(f.path)) for f in files], desc="survey")
        world = max(f.rank for f in files) + 1
        declared = ProcessGroups()
        for s in surveys:
            declared = declared.merged(ProcessGroups(s.declared))
        groups = load_groups(declared, prefix, comm_groups)
        used = set().union(*(s.pg_names for s in surveys))
        pg_map = renumber_groups(groups, used, world)
        starts = [s.first_start_us for s in surveys if s.first_start_us is not None]
        shift_us = min(starts) - 1 if starts else 0
        # searched in every output besides its rank's own strings: the input's paths and the group names
        shared = text_strings(_path_strings([f.path for f in files], prefix)) | text_strings(groups.groups)
        vocabulary_text = _vocabulary_text()
        tasks = [RankTask(f.rank, str(f.path), str(staged.rank_path(f.rank)), policy, shift_us, shift_us * 1000,
                          pg_map, frozenset(shared), vocabulary_text) for f in files]
        outcomes = executor.map(rewrite_rank, tasks, desc="anonymize")
        new_groups = ProcessGroups({pg_map.get(n, n): r for n, r in groups.groups.items()})
        if new_groups.groups:
            new_groups.write(staged.groups_path())
    written = [rank_file_path(out, f.rank) for f in files]
    outputs = written + ([comm_groups_path(out)] if new_groups.groups else [])
    strings = set().union(*(o.strings for o in outcomes)) | shared
    vocabulary = sorted(s for s in strings if s in vocabulary_text)
    kept = sorted(s for s in strings if s not in vocabulary_text and policy.listed_name(s))
    searched = searched_strings(strings, policy, vocabulary_text)
    # each rank's task searched its output for its own strings and the shared ones: the rest are searched here
    rest = [(path, searched - searched_strings(o.strings | shared, policy, vocabulary_text))
            for path, o in zip(written, outcomes)]
    found = set().union(*(o.leaks for o in outcomes))
    leaks = sorted(found | _scan_each(rest + [(p, searched) for p in outputs[len(written):]], executor))
    seconds = time.perf_counter() - began
    from ..validate import ERROR, validate

    report = validate(str(out), executor=executor)
    findings = [str(f) for f in report.findings if f.severity == ERROR]
    return AnonymizeReport(str(job_or_prefix), str(out), len(files), sum(o.nodes for o in outcomes),
                           [str(p) for p in outputs], seconds, len(searched), leaks, vocabulary, kept,
                           report.ok, findings, {k: v for k, v in pg_map.items() if k}, sum(o.tensors for o in outcomes),
                           sum(o.flops_derived for o in outcomes), max((o.max_jitter for o in outcomes), default=0.0),
                           policy)


@record
class Comparison:
    """The simulator's and the analyses' view of a job and its anonymised (or otherwise rewritten) copy."""

    makespan_ns: tuple[float, float]
    finish_ns: dict[int, tuple[float, float]]
    breakdown: dict[str, tuple[float, float]]  # category -> (before, after), ns summed over ranks
    identical: bool

    @property
    def makespan_change(self) -> float:
        before, after = self.makespan_ns
        return after / before - 1.0 if before else 0.0

    @property
    def breakdown_change(self) -> float:
        """The largest change of a breakdown figure, as a fraction of that rank's span."""
        spans = {k.rsplit(" ", 1)[0]: before for k, (before, _) in self.breakdown.items() if k.endswith(" span_ns")}
        return max((abs(after - before) / spans[k.rsplit(" ", 1)[0]] for k, (before, after) in self.breakdown.items()
                    if spans.get(k.rsplit(" ", 1)[0])), default=0.0)

    def within(self, bound: float) -> bool:
        """Whether the step time and every breakdown figure moved by at most ``bound`` (of the step, of the span)."""
        return abs(self.makespan_change) <= bound + 1e-12 and self.breakdown_change <= bound + 1e-12

    def lines(self) -> list[str]:
        a, b = self.makespan_ns
        out = [f"simulated step time: {a / 1e6:,.3f} ms before, {b / 1e6:,.3f} ms after ({self.makespan_change:+.3%})"]
        same = all(x == y for x, y in self.breakdown.values())
        out.append("analysis breakdown by kind: " + ("identical" if same else
                                                     f"largest change {self.breakdown_change:.3%} of a rank's span"))
        return out


@record
class JobView:
    """What :func:`compare_jobs` compares: one job's simulation (per-rank finish, makespan) and breakdown."""

    makespan_ns: float
    finish_ns: dict[int, float]
    breakdown: dict[str, float]


def job_view(job: str | os.PathLike[str] | Job, *, network=None, system=None, preset: str = "hgx-h100",
             executor: Executor | None = None) -> JobView:
    """Simulate ``job`` (``network``/``system`` files, else ``preset``) and take its breakdown by kind."""
    from ..analyze.breakdown import breakdown
    from ..model.job import load_job
    from ..simulate import load_config, simulate

    net, sys_cfg, _ = load_config(network, system, preset=None if network else preset)
    loaded = job if isinstance(job, Job) else load_job(job, executor=executor)
    sim = simulate(loaded, net, sys_cfg)
    return JobView(sim.makespan_ns, {r: f.finish_ns for r, f in sim.ranks.items()}, _breakdown_totals(breakdown(loaded)))


def compare_views(before: JobView, after: JobView) -> Comparison:
    keys = sorted(set(before.breakdown) | set(after.breakdown))
    breakdown = {k: (before.breakdown.get(k, 0.0), after.breakdown.get(k, 0.0)) for k in keys}
    finish = {r: (before.finish_ns[r], after.finish_ns.get(r, float("nan"))) for r in before.finish_ns}
    identical = (before.makespan_ns == after.makespan_ns and all(a == b for a, b in finish.values())
                 and all(a == b for a, b in breakdown.values()))
    return Comparison((before.makespan_ns, after.makespan_ns), finish, breakdown, identical)


def compare_jobs(before: str | os.PathLike[str] | Job, after: str | os.PathLike[str] | Job, *, network=None,
                 system=None, preset: str = "hgx-h100", executor: Executor | None = None) -> Comparison:
    """Simulate both jobs on the same system and take both breakdowns by kind (:class:`Comparison`)."""
    views = [job_view(j, network=network, system=system, preset=preset, executor=executor) for j in (before, after)]
    return compare_views(*views)


def _breakdown_totals(result) -> dict[str, float]:  # noqa: ANN001 - analyze's BreakdownResult
    """Every figure of every rank's breakdown (compute, exposed communication, ...), keyed "rank <r> <figure>"."""
    out: dict[str, float] = {}
    for rank, account in result.ranks.items():
        for key, value in account.to_json().items():
            if isinstance(value, (int, float)):
                out[f"rank {rank} {key}"] = float(value)
    return out

