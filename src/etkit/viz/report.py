"""The HTML report: one self-contained page (inline CSS and SVG, no script, no network) with the
breakdown charts, the timeline of one iteration, the comm matrix heat map (with its colour scale), the
message-size histogram, the critical-path table, top operators, lateness and stragglers, HTA's GPU figures
for a GPU profile and, given a baseline job, the diff.

It scales with the job: up to :data:`MAX_RANKS_SHOWN` ranks every rank is drawn; past that, ranks are
grouped into role classes (:mod:`etkit.analyze.roles`: a pipeline stage, the replicas of a data-parallel
job), each shown as its median rank with the range over its ranks, and the ranks far from their class
are named as outliers; the timeline draws one rank per class and the heat map sums blocks of ranks.
Long names are cut in the middle (the whole name in the cell's tooltip).

Every string that comes from a trace (operator names, process groups, the prefix) is HTML-escaped:
traces are untrusted input.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from html import escape
from pathlib import Path

import numpy as np

from .. import __version__
from ..analyze.breakdown import CATEGORIES
from ..analyze.context import AnalysisContext, prepare
from ..analyze.diff import JobDiff, diff_analyses
from ..analyze.job_analysis import JobAnalysis, analyze_job
from ..analyze.kinds import KIND_NAMES
from ..analyze.roles import format_ranks
from ..analyze.text import fmt_bytes, fmt_ns, middle
from ..executor import Executor
from ..fileio import atomic_output
from ..model.job import Job
from ..model.schedule import Schedule
from ..model.steps import step_name_codes
from ..records import record
from . import svg

__all__ = ["write_report", "render_report", "Iteration", "iterations"]

_MAX_TIMELINE_RANKS = 16
_MAX_BOXES = 6000


@record
class Iteration:
    name: str
    start_ns: float
    end_ns: float


def iterations(ctx: AnalysisContext) -> list[Iteration]:
    """Training steps marked by ``ProfilerStep#N`` ranges on the lowest rank that has them, in time order."""
    for rank in sorted(ctx.views):
        v = ctx.views[rank]
        names = v.trace.strings
        step_idx = step_name_codes(names)
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


def _table(headers: list[str], rows: Sequence[Sequence[object]], left: int = 1) -> str:
    head = "".join(f'<th class="{"l" if i < left else ""}">{escape(str(h))}</th>' for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(_cell(c, i < left) for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: object, left: bool) -> str:
    """A table cell; a long name is cut in the middle, the whole name in its tooltip."""
    text = str(value)
    shown = middle(text, _NAME_WIDTH)
    title = f' title="{escape(text, quote=True)}"' if shown != text else ""
    return f'<td class="{"l" if left else ""}"{title}>{escape(shown)}</td>'


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


#: Ranks drawn one by one; past this the page shows role classes (rank distributions) and names outliers.
MAX_RANKS_SHOWN = 32
#: Widest name in a table cell or chart label before it is cut in the middle.
_NAME_WIDTH = 80
#: A rank is named as an outlier of its class when a category's share of its span is this far from the class median.
OUTLIER_SHARE = 0.05
_COLUMNS = CATEGORIES[:2] + ("overlapped_comm",) + CATEGORIES[2:]


def _spread(values: list[float], fmt) -> str:  # type: ignore[no-untyped-def]
    """``median (min-max)`` of ``values``."""
    if not values:
        return "-"
    lo, med, hi = min(values), float(np.median(values)), max(values)
    return fmt(med) if lo == hi else f"{fmt(med)} ({fmt(lo)}-{fmt(hi)})"


def _classes(a: JobAnalysis, ctx: AnalysisContext) -> list[tuple[str, list[int]]]:
    """Groups of ranks drawn together: every rank on its own for a small job, else the role classes."""
    ranks = sorted(a.breakdown.ranks)
    if len(ranks) <= MAX_RANKS_SHOWN:
        return [(f"rank {r}", [r]) for r in ranks]
    return [(f"class {c.index}: ranks {format_ranks(c.ranks, 3)} ({len(c.ranks)})", [r for r in c.ranks if r in
                                                                                    a.breakdown.ranks])
            for c in ctx.roles]


def _outliers(a: JobAnalysis, groups: list[tuple[str, list[int]]]) -> list[str]:
    """Ranks whose share of a category differs from their class median by more than :data:`OUTLIER_SHARE`."""
    out: list[str] = []
    for label, ranks in groups:
        if len(ranks) < 2:
            continue
        for c in CATEGORIES:
            share = {r: a.breakdown.ranks[r].share(c) for r in ranks}
            med = float(np.median(list(share.values())))
            far = sorted((r for r in ranks if abs(share[r] - med) > OUTLIER_SHARE), key=lambda r: -abs(share[r] - med))
            out.extend(f"rank {r} ({label.split(':')[0]}): {c.replace('_', ' ')} {100 * share[r]:.1f}% of its span, "
                       f"class median {100 * med:.1f}%" for r in far[:5])
    return out


def _breakdown_section(a: JobAnalysis, ctx: AnalysisContext) -> str:
    groups = _classes(a, ctx)
    per_rank = all(len(r) == 1 for _, r in groups)
    labels = {c: c.replace("_", " ") for c in CATEGORIES}
    rows = [(label, {c: float(np.median([getattr(a.breakdown.ranks[r], f"{c}_ns") for r in ranks]))
                     for c in CATEGORIES}) for label, ranks in groups if ranks]
    parts = [svg.legend({c: svg.CATEGORY_COLORS[c] for c in CATEGORIES}, labels)]
    if not per_rank:
        parts.append(f'<p class="note">{len(a.breakdown.ranks)} ranks in {len(groups)} role classes (ranks doing the '
                     "same communication); each bar is a class's median rank, the table gives the median and the "
                     "range over its ranks</p>")
    parts.append(svg.stacked_bars([(middle(label, 40), v) for label, v in rows], CATEGORIES, svg.CATEGORY_COLORS,
                                  fmt_ns))
    overlap = [(middle(label, 40), {"overlapped_comm": v["overlapped_comm"], "exposed_comm": v["exposed_comm"]})
               for label, v in ((label, {c: float(np.median([getattr(a.breakdown.ranks[r], f"{c}_ns") for r in ranks]))
                                         for c in ("overlapped_comm", "exposed_comm")}) for label, ranks in groups if ranks)]
    parts.append("<h3>communication hidden under compute</h3>")
    parts.append(svg.legend({"overlapped_comm": svg.CATEGORY_COLORS["overlapped_comm"],
                             "exposed_comm": svg.CATEGORY_COLORS["exposed_comm"]}))
    parts.append(svg.stacked_bars(overlap, ("overlapped_comm", "exposed_comm"), svg.CATEGORY_COLORS, fmt_ns))
    total = a.breakdown.total
    head = ["rank" if per_rank else "class", "span"] + [c.replace("_", " ") for c in _COLUMNS]
    table_rows = [["job (sum)", fmt_ns(total.span_ns)] + [_pct(getattr(total, f"{c}_ns"), total.span_ns)
                                                         for c in _COLUMNS]]
    for label, ranks in groups:
        if not ranks:
            continue
        b = [a.breakdown.ranks[r] for r in ranks]
        table_rows.append([label.split(" (")[0] if not per_rank else str(ranks[0]),
                           _spread([x.span_ns for x in b], fmt_ns)] +
                          [_spread([x.share(c) for x in b], lambda v: f"{100 * v:.1f}%") for c in _COLUMNS])
    parts.append(_table(head, table_rows))
    outliers = _outliers(a, groups) if not per_rank else []
    if outliers:
        parts.append("<h3>outliers</h3><ul>" + "".join(f"<li>{escape(o)}</li>" for o in outliers[:40]) + "</ul>")
    elif not per_rank:
        parts.append(f'<p class="note">no rank is more than {100 * OUTLIER_SHARE:.0f}% of its span from its class '
                     "median in any category</p>")
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
    if len(ctx.views) <= _MAX_TIMELINE_RANKS:
        ranks, which = sorted(ctx.views), ""
    else:  # one rank per role class: the others do the same work
        ranks = [c.ranks[0] for c in ctx.roles[:_MAX_TIMELINE_RANKS] if c.ranks[0] in ctx.views]
        which = (f"; the first rank of each of the {len(ranks)} role classes (of {len(ctx.roles)}), of "
                 f"{len(ctx.views)} ranks")
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
            lanes.append((middle(f"r{rank} {v.tracks.names[t]}", 24), boxes))
    note = f"<p class=\"note\">{escape(what)}; times from the start of the window{escape(which)}</p>"
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
    groups = sorted(c.by_group.items(), key=lambda kv: (-kv[1].bytes, kv[0]))
    parts.append(_table(["process group", "count", "volume", "time"],
                        [[k, s.count, fmt_bytes(s.bytes), fmt_ns(s.time_ns)] for k, s in groups[:16]]))
    if len(groups) > 16:
        parts.append(f'<p class="note">the 16 groups with most volume of {len(groups)}; every group is in '
                     "etkit analyze --json / --csv</p>")
    parts.append("<h3>rank &#215; rank traffic (bytes on the wire)</h3>")
    if len(c.ranks) > svg.MAX_HEAT_CELLS:
        parts.append(f'<p class="note">{len(c.ranks)} ranks: each cell sums a block of consecutive ranks</p>')
    parts.append(svg.heatmap(c.matrix, [str(r) for r in c.ranks], fmt_bytes, what="bytes"))
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
    chart = svg.bar_chart([middle(o.name, 40) for o in ops], [o.total_ns for o in ops], fmt_ns)
    rows = [[o.name, o.kind, o.count, fmt_ns(o.total_ns), fmt_ns(o.exclusive_ns)] for o in ops]
    kinds = [[o.name, o.count, fmt_ns(o.total_ns), fmt_ns(o.exclusive_ns)] for o in a.top_ops.by_kind]
    return (chart + _table(["operator", "kind", "count", "total", "exclusive"], rows, left=2)
            + _table(["kind", "count", "total", "exclusive"], kinds))


def _imbalance_section(a: JobAnalysis, ctx: AnalysisContext) -> str:
    im = a.imbalance
    groups = _classes(a, ctx)
    per_rank = all(len(r) == 1 for _, r in groups)
    text = (f"<p>max/mean busy time {im.imbalance:.3f}; median busy {escape(fmt_ns(im.median_busy_ns))}; "
            f"{len(im.stragglers)} straggler(s): ranks whose arriving last made the others wait more than the "
            f"ranks doing the same work, by over {100 * im.threshold:.0f}% of the median span</p>")
    load = {x.rank: x for x in im.ranks}
    if per_rank:
        chart = svg.stacked_bars([(f"rank {r}", {"caused": load[r].caused_ns, "waited": load[r].waited_ns})
                                  for _, (r,) in groups], ("caused", "waited"),
                                 {"caused": "#e15759", "waited": svg.CATEGORY_COLORS["waiting"]}, fmt_ns)
        legend = svg.legend({"waiting caused (arrived last)": "#e15759", "waited": svg.CATEGORY_COLORS["waiting"]})
    else:
        chart = _table(["class", "waiting caused", "waited", "busy"],
                       [[label.split(" (")[0], _spread([load[r].caused_ns for r in ranks], fmt_ns),
                         _spread([load[r].waited_ns for r in ranks], fmt_ns),
                         _spread([load[r].busy_ns for r in ranks], fmt_ns)] for label, ranks in groups if ranks])
        legend = ""
    rows = [[s.rank, s.role, fmt_ns(s.caused_ns), fmt_ns(s.excess_ns), s.late_count, fmt_ns(s.waited_ns),
             fmt_ns(s.busy_ns)] for s in im.stragglers[:32]]
    out = text + legend + chart
    if rows:
        out += "<h3>stragglers</h3>" + _table(["rank", "class", "waiting caused", "beyond its class", "late at",
                                               "waited", "busy"], rows, left=0)
    if im.events:
        out += "<h3>longest waits</h3>" + _table(
            ["what", "group", "late rank", "node", "at", "waited (sum)", "ranks waiting"],
            [[e.what, e.group or "-", e.late_rank, e.name, fmt_ns(e.start_ns), fmt_ns(e.total_ns), len(e.waits)]
             for e in im.events[:20]], left=2)
    return out


def _gpu_section(a: JobAnalysis, ctx: AnalysisContext) -> str:
    g = a.gpu
    assert g is not None
    groups = _classes(a, ctx)
    temporal = {t.rank: t for t in g.temporal.ranks}
    parts = ['<p class="note">as HTA defines them: over the first to the last GPU activity of each rank, the last '
             "ProfilerStep left out</p>"]
    parts.append(_table(["rank" if all(len(r) == 1 for _, r in groups) else "class", "kernel time", "idle", "compute",
                         "non-compute", "comm under compute"],
                        [[label, _spread([temporal[r].kernel_ns for r in ranks if r in temporal], fmt_ns)] +
                         [_spread([temporal[r].pct(w) for r in ranks if r in temporal], lambda v: f"{v:.1f}%")
                          for w in ("idle", "compute", "non_compute")] +
                         [_spread([100 * g.overlap.get(r, 0.0) for r in ranks], lambda v: f"{v:.1f}%")]
                         for label, ranks in groups if ranks]))
    types = sorted(g.kernels.by_type.items(), key=lambda kv: -kv[1])
    parts.append(svg.bar_chart([k for k, _ in types], [float(v) for _, v in types], fmt_ns, color="#4e79a7"))
    dist = g.kernels.distribution()
    names = sorted(dist, key=lambda n: -dist[n][2])[:20]
    parts.append("<h3>kernels (summed time over ranks: min / median / max)</h3>")
    parts.append(_table(["kernel", "type", "min", "median", "max"],
                        [[n, next(k.kernel_type for k in g.kernels.kernels if k.name == n)] +
                         [fmt_ns(v) for v in dist[n]] for n in names]))
    idle: dict[str, int] = {}
    for _, _, cat, t, _ in g.idle.rows:
        idle[cat] = idle.get(cat, 0) + t
    parts.append("<p>GPU idle time by cause, all ranks and streams: " + ", ".join(
        f"{escape(c.replace('_', ' '))} {escape(fmt_ns(t))} ({_pct(t, sum(idle.values()))})" for c, t in idle.items())
        + "</p>")
    rows = [[r, w, c, fmt_ns(m), fmt_ns(med), fmt_ns(p95), fmt_ns(mx)] for r, w, c, _, m, med, p95, mx in
            g.launches.summary() if c][:48]
    if rows:
        parts.append("<h3>kernel launches</h3>" + _table(["rank", "what", "count", "mean", "median", "p95", "max"],
                                                           rows, left=2))
    return "".join(parts)


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
        ("time breakdown", _breakdown_section(a, context)),
        ("timeline", _timeline_section(context, iteration)),
        ("communication", _comm_section(a)),
        ("critical path", _critical_section(a)),
        ("top operators", _ops_section(a)),
        ("load imbalance", _imbalance_section(a, context)),
    ]
    if a.gpu is not None:
        sections.append(("GPU", _gpu_section(a, context)))
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
