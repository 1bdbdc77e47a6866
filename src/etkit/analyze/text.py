"""Plain-text rendering of analysis results for the terminal (the CLI prints these)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..units import format_bytes
from .breakdown import CATEGORIES, TimeBreakdown
from .comm import SizeHistogram
from .job_analysis import JobAnalysis
from .kinds import KIND_NAMES

if TYPE_CHECKING:  # pragma: no cover - the diff (its records) is imported by the diff verb alone
    from .diff import Delta, JobDiff

__all__ = ["table", "fmt_ns", "fmt_bytes", "render_analysis", "render_diff", "middle"]


def fmt_ns(ns: float) -> str:
    """``1.23 ms`` style duration."""
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def fmt_bytes(n: float) -> str:
    return format_bytes(n)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A left/right aligned text table (numbers right, text left)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(_looks_numeric(r[i]) for r in cells[1:]) if rows else False for i in range(len(headers))]
    lines = []
    for j, r in enumerate(cells):
        parts = [c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(parts).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _looks_numeric(text: str) -> bool:
    head = text.split(" ", 1)[0].rstrip("%x")
    try:
        float(head)
        return True
    except ValueError:
        return False


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


#: Breakdown table columns: the categories with overlapped communication after the exposed one.
BREAKDOWN_COLUMNS = CATEGORIES[:2] + ("overlapped_comm",) + CATEGORIES[2:]


def _breakdown_row(label: str, b: TimeBreakdown) -> list[str]:
    return [label, fmt_ns(b.span_ns)] + [_pct(getattr(b, f"{c}_ns"), b.span_ns) for c in BREAKDOWN_COLUMNS]


def render_analysis(a: JobAnalysis, *, max_ranks: int = 16, top: int = 15) -> str:
    """The ``etkit analyze`` report."""
    out: list[str] = []
    out.append(f"job {a.prefix or '-'}: {a.world_size} rank(s), makespan {fmt_ns(a.makespan_ns)}")
    out.append(f"times from: {a.source}")
    out.extend(f"note: {n}" for n in a.notes)
    out.append("nodes: " + ", ".join(f"{k} {v}" for k, v in a.node_counts.items()))

    out.append("\n== time breakdown (share of each rank's span)")
    head = ["rank", "span"] + [c.replace("_", " ") for c in BREAKDOWN_COLUMNS]
    ranks = sorted(a.breakdown.ranks.items())
    rows = [_breakdown_row("job", a.breakdown.total)]
    rows += [_breakdown_row(str(r), b) for r, b in ranks[:max_ranks]]
    out.append(table(head, rows))
    if len(ranks) > max_ranks:
        out.append(f"({len(ranks) - max_ranks} more ranks in --json)")

    ops = a.top_ops
    out.append(f"\n== top operators by total time ({len(ops.by_name)} names)")
    out.append(table(["operator", "kind", "count", "total", "exclusive"],
                     [[middle(o.name, 60), o.kind, o.count, fmt_ns(o.total_ns), fmt_ns(o.exclusive_ns)]
                      for o in ops.by_name[:top]]))
    out.append("\n== top operators by exclusive time")
    out.append(table(["operator", "kind", "count", "exclusive", "total"],
                     [[middle(o.name, 60), o.kind, o.count, fmt_ns(o.exclusive_ns), fmt_ns(o.total_ns)]
                      for o in ops.by_exclusive(top)]))
    out.append("\n== time by kind")
    out.append(table(["kind", "count", "total", "exclusive"],
                     [[o.name, o.count, fmt_ns(o.total_ns), fmt_ns(o.exclusive_ns)] for o in ops.by_kind]))

    c = a.comm
    out.append(f"\n== communication: {c.total.count} op(s), {fmt_bytes(c.total.bytes)}, {fmt_ns(c.total.time_ns)}")
    if c.total.count:
        out.append(table(["type", "count", "volume", "time"],
                         [[k, s.count, fmt_bytes(s.bytes), fmt_ns(s.time_ns)] for k, s in sorted(c.by_type.items())]))
        out.append("")
        groups = sorted(c.by_group.items(), key=lambda kv: (-kv[1].bytes, kv[0]))
        out.append(table(["process group", "count", "volume", "time"],
                         [[k, s.count, fmt_bytes(s.bytes), fmt_ns(s.time_ns)] for k, s in groups[:top]]))
        if len(groups) > top:
            out.append(f"({len(groups) - top} more groups in --json)")
        out.append("\nmessage sizes:")
        out.append(_histogram(c.histogram))
        out.append(f"\ntraffic matrix (bytes on the wire, {c.algorithm} algorithm; rows send, columns receive):")
        out.append(_matrix(c.ranks, c.matrix, max_ranks))

    p = a.critical_path
    out.append(f"\n== critical path: {fmt_ns(p.length_ns)}, {len(p)} node(s)")
    out.extend(f"note: {n}" for n in p.notes)
    share = p.share_by_kind()
    out.append(", ".join(f"{k} {fmt_ns(v)} ({_pct(v, p.length_ns)})" for k, v in share.items()))
    per_rank = sorted(p.per_rank().items(), key=lambda kv: -kv[1])
    out.append("by rank: " + ", ".join(f"{r}: {fmt_ns(t)}" for r, t in per_rank[:max_ranks]))
    out.append(table(["rank", "id", "node", "kind", "start", "on path"],
                     [[int(p.rank[i]), int(p.node_id[i]), middle(p.names[i], 50), KIND_NAMES[int(p.kind[i])],
                       fmt_ns(p.start_ns[i]), fmt_ns(p.on_path_ns[i])] for i in sorted(p.top(top).tolist())]))

    im = a.imbalance
    out.append(f"\n== load imbalance and lateness: max/mean busy {im.imbalance:.3f}, median busy "
               f"{fmt_ns(im.median_busy_ns)}")
    late = [x for x in im.ranks if x.caused_ns > 0][:max_ranks]
    if late:
        out.append("waiting each rank made the others do by arriving last (caused), beyond the median of its role "
                   "class (excess):")
        out.append(table(["rank", "class", "caused", "excess", "late at", "waited", "busy"],
                         [[x.rank, x.role, fmt_ns(x.caused_ns), fmt_ns(x.excess_ns), x.late_count, fmt_ns(x.waited_ns),
                           fmt_ns(x.busy_ns)] for x in late]))
    if im.stragglers:
        out.append(f"stragglers (excess waiting caused > {100 * im.threshold:.0f}% of the median rank span): "
                   + ", ".join(str(x.rank) for x in im.stragglers[:max_ranks]))
    else:
        out.append("no stragglers")
    if im.events:
        out.append("longest waits:")
        out.append(table(["what", "group", "late rank", "node", "at", "waited (total)", "waiting ranks"],
                         [[e.what, e.group or "-", e.late_rank, middle(e.name, 40), fmt_ns(e.start_ns), fmt_ns(e.total_ns),
                           len(e.waits)] for e in im.events[:min(top, 10)]]))
    if a.gpu is not None:
        out.append(_render_gpu(a, max_ranks=max_ranks, top=top))
    return "\n".join(out) + "\n"


def _render_gpu(a: JobAnalysis, *, max_ranks: int, top: int) -> str:
    """The GPU section: HTA's questions (etkit.analyze.gpu)."""
    g = a.gpu
    assert g is not None
    out = ["\n== GPU (as HTA defines it: first to last GPU activity, the last ProfilerStep left out)"]
    out.append(table(["rank", "kernel time", "idle", "compute", "non-compute", "comm under compute"],
                     [[t.rank, fmt_ns(t.kernel_ns), f"{t.pct('idle'):.1f}%", f"{t.pct('compute'):.1f}%",
                       f"{t.pct('non_compute'):.1f}%", f"{100 * g.overlap.get(t.rank, 0.0):.1f}%"]
                      for t in g.temporal.ranks[:max_ranks]]))
    total = sum(g.kernels.by_type.values()) or 1
    out.append("\nkernel time by type: " + ", ".join(f"{k} {fmt_ns(v)} ({100 * v / total:.1f}%)" for k, v in
                                                       sorted(g.kernels.by_type.items(), key=lambda kv: -kv[1])))
    dist = g.kernels.distribution()
    names = sorted(dist, key=lambda n: -dist[n][2])[:top]
    out.append(table(["kernel", "type", "sum (min/median/max over ranks)"],
                     [[middle(n, 60), next(k.kernel_type for k in g.kernels.kernels if k.name == n),
                       " / ".join(fmt_ns(v) for v in dist[n])] for n in names]))
    idle: dict[tuple[int, str], int] = {}
    for rank, _, cat, t, _ in g.idle.rows:
        idle[(rank, cat)] = idle.get((rank, cat), 0) + t
    out.append("\nidle time by cause (all streams): " + "; ".join(
        f"rank {r}: " + ", ".join(f"{c} {fmt_ns(idle.get((r, c), 0))}" for c in ("host_wait", "kernel_wait", "other"))
        for r in sorted({r for r, _ in idle})[:max_ranks]))
    rows = [row for row in g.launches.summary() if row[2]]
    if rows:
        out.append("\nkernel launches (runtime call, kernel, launch delay):")
        out.append(table(["rank", "what", "count", "mean", "median", "p95", "max"],
                         [[r, w, c, fmt_ns(m), fmt_ns(med), fmt_ns(p95), fmt_ns(mx)] for r, w, c, _, m, med, p95, mx in
                          rows[:3 * max_ranks]]))
    return "\n".join(out)


def middle(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters in the middle (``start…end``), so both ends stay readable."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[:keep - keep // 2] + "\u2026" + text[len(text) - keep // 2:]


def _histogram(h: SizeHistogram) -> str:
    if not h.counts:
        return "(no sizes)"
    most = max(h.counts.values())
    return "\n".join(f"{h.bin_label(b):>20}  {h.counts[b]:>8}  {'#' * max(1, round(30 * h.counts[b] / most))}"
                     for b in sorted(h.counts))


def _matrix(ranks: list[int], matrix, max_ranks: int) -> str:  # type: ignore[no-untyped-def]
    if len(ranks) > max_ranks:
        return f"({len(ranks)} ranks: see --json or the HTML report)"
    return table(["src\\dst"] + [str(r) for r in ranks],
                 [[str(r)] + [fmt_bytes(v) if v else "." for v in matrix[i]] for i, r in enumerate(ranks)])


def _delta_rows(deltas: Sequence[Delta], fmt) -> list[list[str]]:  # type: ignore[no-untyped-def]
    return [[middle(d.key, 60), fmt(d.a), fmt(d.b), fmt(d.delta), d.ratio_text]
            for d in deltas]


def render_diff(d: JobDiff, *, top: int = 20) -> str:
    """The ``etkit diff`` report."""
    head = ["", d.a_name, d.b_name, "delta", "b/a"]
    count = lambda v: f"{v:.0f}"  # noqa: E731
    out = [f"diff {d.a_name} -> {d.b_name}", "\n== summary"]
    out.append(table(head, [[x.key, *(_delta_rows([x], fmt_bytes if "bytes" in x.key else
                                                   (fmt_ns if x.key.endswith("_ns") else count))[0][1:])]
                            for x in d.summary]))
    out += ["\n== nodes by type", table(head, _delta_rows(d.node_counts, count))]
    out += ["\n== breakdown (summed over ranks)", table(head, _delta_rows(d.breakdown, fmt_ns))]
    out += [f"\n== operator time, largest changes first (top {top})", table(head, _delta_rows(d.op_time[:top], fmt_ns))]
    if d.comm_bytes:
        out += ["\n== communication volume by type", table(head, _delta_rows(d.comm_bytes, fmt_bytes))]
        out += ["\n== communication time by type", table(head, _delta_rows(d.comm_time, fmt_ns))]
    return "\n".join(out) + "\n"
