"""The HTML report: one self-contained page (inline CSS and SVG, no script, no network) with the
breakdown charts, the timeline of one iteration, the comm matrix heat map, the message-size histogram,
the critical-path table, top operators, stragglers and, given a baseline job, the diff.

Every string that comes from a trace (operator names, process groups, the prefix) is HTML-escaped:
traces are untrusted input.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from html import escape
from pathlib import Path

import numpy as np

from .. import __version__
from ..analyze.breakdown import CATEGORIES
from ..analyze.context import AnalysisContext, prepare
from ..analyze.diff import JobDiff, diff_analyses
from ..analyze.job_analysis import JobAnalysis, analyze_job
from ..analyze.kinds import KIND_NAMES
from ..analyze.text import fmt_bytes, fmt_ns
from ..executor import Executor
from ..fileio import atomic_output
from ..model.job import Job
from ..model.schedule import Schedule
from . import svg

__all__ = ["write_report", "render_report", "Iteration", "iterations"]

_STEP = re.compile(r"^ProfilerStep#\d+$")
_MAX_TIMELINE_RANKS = 16
_MAX_BOXES = 6000


@dataclass
class Iteration:
    name: str
    start_ns: float
    end_ns: float


def iterations(ctx: AnalysisContext) -> list[Iteration]:
    """Training steps marked by ``ProfilerStep#N`` ranges on the lowest rank that has them, in time order."""
    for rank in sorted(ctx.views):
        v = ctx.views[rank]
        names = v.trace.strings
        step_idx = [i for i, s in enumerate(names) if _STEP.match(s)]
        if not step_idx:
            continue
        rows = np.flatnonzero(np.isin(v.trace.name_idx, step_idx) & v.sched.ran)
        found = [Iteration(v.trace.name(int(r)), float(v.sched.start_ns[r]), float(v.sched.end_ns[r])) for r in rows]
        if found:
            return sorted(found, key=lambda it: it.start_ns)
    return []


_CSS = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:17px;border-bottom:1px solid #ccc;padding-bottom:3px;margin-top:28px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}td.l,th.l{text-align:left}
th{background:#f4f4f4}.legend{font-size:12px;margin:4px 0}.swatch{display:inline-block;width:10px;height:10px;
margin:0 3px 0 8px}.note{color:#666;font-size:12px}svg.chart{display:block;margin:6px 0}
"""


def _table(headers: list[str], rows: list[list[object]], left: int = 1) -> str:
    head = "".join(f'<th class="{"l" if i < left else ""}">{escape(str(h))}</th>' for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{escape(str(c))}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _breakdown_section(a: JobAnalysis) -> str:
    ranks = sorted(a.breakdown.ranks.items())
    rows = [(f"rank {r}", {c: getattr(b, f"{c}_ns") for c in CATEGORIES}) for r, b in ranks[:256]]
    total = a.breakdown.total
    labels = {c: c.replace("_", " ") for c in CATEGORIES}
    parts = [svg.legend({c: svg.CATEGORY_COLORS[c] for c in CATEGORIES}, labels),
             svg.stacked_bars(rows, CATEGORIES, svg.CATEGORY_COLORS, fmt_ns)]
    if len(ranks) > 256:
        parts.append(f'<p class="note">first 256 of {len(ranks)} ranks shown</p>')
    overlap = [(f"rank {r}", {"overlapped_comm": b.overlapped_comm_ns, "exposed_comm": b.exposed_comm_ns})
               for r, b in ranks[:256]]
    parts.append("<h3>communication hidden under compute</h3>")
    parts.append(svg.legend({"overlapped_comm": svg.CATEGORY_COLORS["overlapped_comm"],
                             "exposed_comm": svg.CATEGORY_COLORS["exposed_comm"]}))
    parts.append(svg.stacked_bars(overlap, ("overlapped_comm", "exposed_comm"), svg.CATEGORY_COLORS, fmt_ns))
    head = ["rank", "span", "compute", "exposed comm", "overlapped comm", "memory", "host", "idle"]
    table_rows = [["job (sum)", fmt_ns(total.span_ns)] + [_pct(getattr(total, f"{c}_ns"), total.span_ns)
                                                         for c in ("compute", "exposed_comm", "overlapped_comm",
                                                                   "memory", "host", "idle")]]
    for r, b in ranks[:16]:
        table_rows.append([str(r), fmt_ns(b.span_ns)] + [_pct(getattr(b, f"{c}_ns"), b.span_ns) for c in
                                                        ("compute", "exposed_comm", "overlapped_comm", "memory",
                                                         "host", "idle")])
    parts.append(_table(head, table_rows))
    if len(ranks) > 16:
        parts.append(f'<p class="note">first 16 of {len(ranks)} ranks; every rank is in etkit analyze --json</p>')
    return "".join(parts)


def _timeline_section(ctx: AnalysisContext, iteration: int | None) -> str:
    steps = iterations(ctx)
    if steps:
        index = len(steps) - 1 if iteration is None else iteration
        if not -len(steps) <= index < len(steps):
            from ..errors import UsageError

            raise UsageError(f"iteration {iteration} out of range: the job has {len(steps)} ({steps[0].name} ...)")
        index %= len(steps)
        step = steps[index]
        t0, t1, what = step.start_ns, step.end_ns, f"{step.name} ({index + 1} of {len(steps)} steps)"
    else:
        t0 = ctx.origin_ns
        t1 = max((v.span[1] for v in ctx.views.values() if v.sched.ran.any()), default=t0)
        what = "whole run (no ProfilerStep# ranges to pick an iteration from)"
    lanes: list[tuple[str, list[tuple[float, float, str, str]]]] = []
    boxes_left = _MAX_BOXES
    ranks = sorted(ctx.views)[:_MAX_TIMELINE_RANKS]
    for rank in ranks:
        v = ctx.views[rank]
        s, e, tr = v.sched.start_ns, v.sched.end_ns, v.tracks.track
        inside = np.flatnonzero(v.sched.ran & (e >= t0) & (s <= t1))
        budget = max(boxes_left // max(len(ranks), 1), 50)
        if len(inside) > budget:  # keep the longest, they are the ones visible at this scale
            inside = inside[np.argsort(-(e[inside] - s[inside]), kind="stable")[:budget]]
        boxes_left -= len(inside)
        by_track: dict[int, list[int]] = {}
        for row in inside[np.lexsort((-(e[inside] - s[inside]), s[inside]))].tolist():
            by_track.setdefault(int(tr[row]), []).append(row)
        for t in sorted(by_track):
            boxes = [(float(s[r]), float(e[r]), v.trace.name(r), svg.KIND_COLORS[KIND_NAMES[int(v.kinds[r])]])
                     for r in by_track[t]]
            lanes.append((f"r{rank} {v.tracks.names[t]}", boxes))
    note = f"<p class=\"note\">{escape(what)}; times from the start of the window"
    if len(ctx.views) > len(ranks):
        note += f"; first {len(ranks)} of {len(ctx.views)} ranks"
    note += "</p>"
    return (note + svg.legend({k: svg.KIND_COLORS[k] for k in KIND_NAMES[:4]}) +
            svg.gantt(lanes, t0, t1, fmt_ns))


def _comm_section(a: JobAnalysis) -> str:
    c = a.comm
    if not c.total.count:
        return '<p class="note">no communication nodes</p>'
    parts = [f"<p>{c.total.count} operation(s), {escape(fmt_bytes(c.total.bytes))} as written, "
             f"{escape(fmt_bytes(float(c.matrix.sum())))} on the wire ({escape(c.algorithm)} algorithm)</p>"]
    parts.append(_table(["type", "count", "volume", "time"],
                        [[k, s.count, fmt_bytes(s.bytes), fmt_ns(s.time_ns)] for k, s in sorted(c.by_type.items())]))
    groups = sorted(c.by_group.items(), key=lambda kv: (-kv[1].bytes, kv[0]))[:64]
    parts.append(_table(["process group", "count", "volume", "time"],
                        [[k, s.count, fmt_bytes(s.bytes), fmt_ns(s.time_ns)] for k, s in groups]))
    parts.append("<h3>rank &#215; rank traffic (bytes on the wire)</h3>")
    parts.append(svg.heatmap(c.matrix, [str(r) for r in c.ranks], fmt_bytes))
    parts.append("<h3>message sizes</h3>")
    h = c.histogram
    bins = sorted(h.counts)
    parts.append(svg.bar_chart([h.bin_label(b) for b in bins], [float(h.counts[b]) for b in bins],
                               lambda v: f"{v:.0f} msg", color="#e15759"))
    return "".join(parts)


def _critical_section(a: JobAnalysis) -> str:
    p = a.critical_path
    share = p.share_by_kind()
    parts = [f"<p>length {escape(fmt_ns(p.length_ns))}, {len(p)} node(s) on the path</p>"]
    parts.extend(f'<p class="note">{escape(n)}</p>' for n in p.notes)
    parts.append(svg.stacked_bars([("path", share)], list(share), svg.KIND_COLORS, fmt_ns))
    parts.append(svg.legend({k: svg.KIND_COLORS[k] for k in share}))
    idx = sorted(p.top(40).tolist())
    parts.append(_table(["rank", "id", "node", "kind", "start", "duration", "on path", "share"],
                        [[int(p.rank[i]), int(p.node_id[i]), p.names[i], KIND_NAMES[int(p.kind[i])],
                          fmt_ns(p.start_ns[i]), fmt_ns(p.end_ns[i] - p.start_ns[i]), fmt_ns(p.on_path_ns[i]),
                          _pct(p.on_path_ns[i], p.length_ns)] for i in idx], left=0))
    if len(p) > len(idx):
        parts.append(f'<p class="note">the {len(idx)} nodes with most time on the path, in path order</p>')
    return "".join(parts)


def _ops_section(a: JobAnalysis) -> str:
    ops = a.top_ops.by_name[:20]
    chart = svg.bar_chart([o.name[:40] for o in ops], [o.total_ns for o in ops], fmt_ns)
    rows = [[o.name, o.kind, o.count, fmt_ns(o.total_ns), fmt_ns(o.exclusive_ns)] for o in ops]
    kinds = [[o.name, o.count, fmt_ns(o.total_ns), fmt_ns(o.exclusive_ns)] for o in a.top_ops.by_kind]
    return (chart + _table(["operator", "kind", "count", "total", "exclusive"], rows, left=2)
            + _table(["kind", "count", "total", "exclusive"], kinds))


def _imbalance_section(a: JobAnalysis) -> str:
    im = a.imbalance
    loads = sorted(im.ranks, key=lambda x: x.rank)[:256]
    chart = svg.bar_chart([f"rank {x.rank}" for x in loads], [x.busy_ns for x in loads], fmt_ns, label_width=90)
    text = (f"<p>max/mean busy time {im.imbalance:.3f}; median busy {escape(fmt_ns(im.median_busy_ns))}; "
            f"{len(im.stragglers)} straggler(s) over {100 * im.threshold:.0f}%</p>")
    rows = [[s.rank, fmt_ns(s.busy_ns), f"{100 * s.busy_over_median:+.1f}%", fmt_ns(s.end_ns),
             f"{100 * s.end_over_median:+.1f}%"] for s in im.stragglers[:32]]
    return text + chart + (_table(["rank", "busy", "vs median", "finish", "vs median"], rows, left=0) if rows else "")


def _diff_section(d: JobDiff) -> str:
    def rows(deltas, fmt):  # type: ignore[no-untyped-def]
        return [[x.key, fmt(x.a), fmt(x.b), fmt(x.delta), x.ratio_text]
                for x in deltas]

    head = ["", d.a_name, d.b_name, "delta", "b/a"]
    count = lambda v: f"{v:.0f}"  # noqa: E731
    summary = [[x.key, *(fmt_bytes(v) if "bytes" in x.key else fmt_ns(v) if x.key.endswith("_ns") else count(v)
                         for v in (x.a, x.b, x.delta)), x.ratio_text] for x in d.summary]
    top = d.op_time[:15]
    chart = svg.bar_chart([x.key[:40] for x in top], [abs(x.delta) for x in top],
                          lambda v: fmt_ns(v), color="#59a14f")
    return ("<h3>summary</h3>" + _table(head, summary) + "<h3>nodes by type</h3>" +
            _table(head, rows(d.node_counts, count)) + "<h3>breakdown (summed over ranks)</h3>" +
            _table(head, rows(d.breakdown, fmt_ns)) + "<h3>largest operator time changes (|delta|)</h3>" + chart +
            _table(head, rows(top, fmt_ns)) + "<h3>communication volume by type</h3>" +
            _table(head, rows(d.comm_bytes, fmt_bytes)))


def render_report(analysis: JobAnalysis, context: AnalysisContext, *, diff: JobDiff | None = None,
                  iteration: int | None = None, title: str | None = None) -> str:
    """The report page as a string (see the module docstring)."""
    a = analysis
    name = title or f"etkit report: {a.prefix or 'job'}"
    sections = [
        ("summary", f"<p>{a.world_size} rank(s), makespan {escape(fmt_ns(a.makespan_ns))}, critical path "
                    f"{escape(fmt_ns(a.critical_path.length_ns))}. Times from: {escape(a.source)}.</p>"
                    + "".join(f'<p class="note">{escape(n)}</p>' for n in a.notes)
                    + _table(["node type", "count"], [[k, v] for k, v in a.node_counts.items()])),
        ("time breakdown", _breakdown_section(a)),
        ("timeline", _timeline_section(context, iteration)),
        ("communication", _comm_section(a)),
        ("critical path", _critical_section(a)),
        ("top operators", _ops_section(a)),
        ("load imbalance", _imbalance_section(a)),
    ]
    if diff is not None:
        sections.append((f"diff: {diff.a_name} -> {diff.b_name}", _diff_section(diff)))
    body = "".join(f'<section id="{escape(t.split(":")[0].replace(" ", "-"))}"><h2>{escape(t)}</h2>{html}</section>'
                   for t, html in sections)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(name)}</title>'
            f"<style>{_CSS}</style></head><body><h1>{escape(name)}</h1>{body}"
            f'<p class="note">etkit {escape(__version__)}</p></body></html>\n')


def write_report(job: Job, out_html: str | os.PathLike[str], *, schedule: Schedule | None = None,
                 baseline: Job | None = None, baseline_schedule: Schedule | None = None,
                 iteration: int | None = None, title: str | None = None, algorithm: str = "ring",
                 executor: Executor | None = None) -> Path:
    """Analyse ``job`` (and ``baseline``, shown as a diff baseline -> job) and write the HTML report.

    ``schedule``: times to use (e.g. a simulation's); default: trace timestamps, else durations.
    ``iteration``: index of the ``ProfilerStep#`` range drawn in the timeline (default: the last).
    """
    ctx = prepare(job, schedule, executor=executor)
    analysis = analyze_job(job, algorithm=algorithm, context=ctx)
    diff = None
    if baseline is not None:
        diff = diff_analyses(analyze_job(baseline, baseline_schedule, algorithm=algorithm, executor=executor),
                             analysis)
    page = render_report(analysis, ctx, diff=diff, iteration=iteration, title=title)
    with atomic_output(out_html, compress=False) as out:
        out.write(page.encode("utf-8"))
    return Path(out_html)
