"""Draw a readable piece of one rank's dependency graph: dot, svg, png, pdf or graphml.

Big traces have far too many nodes to draw, so a graph is a selection: ``around`` a node id within
``depth`` dependency hops (both directions), narrowed by ``filters``. Nodes a filter drops are bridged
(an edge joins a kept node to the kept nodes it reaches through dropped ones, drawn dashed, with
shortcuts implied by longer paths removed), so ordering stays visible. Critical-path nodes and the
edges between them are drawn red.

Filters (all must hold): ``type=COMP,COMM_COLL`` (node types, ``_NODE`` optional), ``kind=comm``
(compute, cpu, comm, memory, other), ``name~REGEX`` (search), ``dur>=US`` / ``dur<=US`` (microseconds).

svg, png and pdf go through Graphviz ``dot`` when it is installed, else through a built-in layered layout
drawn with matplotlib (nodes in rows by dependency depth).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from html import escape
from pathlib import Path

import numpy as np

from ..analyze.kinds import KIND_NAMES, node_kinds
from ..analyze.timing import dependency_rows, topological_order
from ..arrays import distinct
from ..errors import DependencyError, OptionError, UsageError
from ..fileio import atomic_output
from ..model.trace import Trace, node_type_name
from ..records import record
from ..safetext import xml_text
from .svg import KIND_COLORS

__all__ = ["SubGraph", "select_subgraph", "parse_filter", "write_graph", "FORMATS"]

FORMATS = ("dot", "svg", "png", "pdf", "graphml")
_BRIDGE_FAN_IN = 8
_NOT_A_FILTER = "{filters}: not a filter; use type=..., kind=..., name~REGEX, dur>=US or dur<=US"
_FILTER = re.compile(r"^(?P<key>type|kind|name|dur)\s*(?P<op>=|~|>=|<=)\s*(?P<value>.+)$")


@record
class SubGraph:
    trace: Trace
    rows: np.ndarray  # selected rows, in file order
    edges: list[tuple[int, int, bool]]  # (parent row, child row, bridged through dropped nodes)
    critical: set[int]  # rows on the critical path

    def label(self, row: int) -> str:
        return f"{int(self.trace.ids[row])}: {xml_text(self.trace.name(row))}"


def parse_filter(text: str):  # type: ignore[no-untyped-def]
    """A predicate ``(trace, kinds) -> bool mask`` from one filter expression (see the module docstring)."""
    m = _FILTER.match(text.strip())
    if not m:
        raise OptionError(_NOT_A_FILTER, filters=text)
    key, op, value = m["key"], m["op"], m["value"].strip()
    if key == "type" and op == "=":
        wanted = {v.strip().upper().removesuffix("_NODE") for v in value.split(",")}
        return lambda t, k: np.isin(t.types, [c for c in range(16) if node_type_name(c).removesuffix("_NODE") in wanted])
    if key == "kind" and op == "=":
        codes = [KIND_NAMES.index(v.strip()) for v in value.split(",") if v.strip() in KIND_NAMES]
        if not codes:
            raise OptionError(f"{{filters}}: kinds are {', '.join(KIND_NAMES)}", filters=text)
        return lambda t, k: np.isin(k, codes)
    if key == "name" and op == "~":
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise OptionError("{filters}: " + _literal(str(exc)), filters=text) from None
        return lambda t, k: np.isin(t.name_idx, [i for i, s in enumerate(t.strings) if pattern.search(s)])
    if key == "dur" and op in (">=", "<="):
        try:
            limit = float(value)
        except ValueError:
            raise OptionError("{filters}: a duration is a number of microseconds", filters=text) from None
        return (lambda t, k: t.duration >= limit) if op == ">=" else (lambda t, k: t.duration <= limit)
    raise OptionError(_NOT_A_FILTER, filters=text)


def _literal(text: str) -> str:
    """``text`` as literal words of an :class:`OptionError` template (its braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")


@record
class _Csr:
    """Parents and children of every row as CSR arrays (numpy: no per-node Python objects)."""

    parent_ptr: np.ndarray
    parents: np.ndarray
    child_ptr: np.ndarray
    children: np.ndarray

    @classmethod
    def of(cls, trace: Trace) -> _Csr:
        dst, src = dependency_rows(trace)
        n = len(trace)
        by_dst, by_src = np.argsort(dst, kind="stable"), np.argsort(src, kind="stable")
        ptr = lambda keys: np.concatenate(([0], np.cumsum(np.bincount(keys, minlength=n))))  # noqa: E731
        return cls(ptr(dst), src[by_dst], ptr(src), dst[by_src])

    def parents_of(self, row: int) -> np.ndarray:
        return self.parents[self.parent_ptr[row]:self.parent_ptr[row + 1]]

    def neighbours(self, rows: np.ndarray) -> np.ndarray:
        """Parents and children of all ``rows`` at once."""
        out = []
        for ptr, values in ((self.parent_ptr, self.parents), (self.child_ptr, self.children)):
            starts, ends = ptr[rows], ptr[rows + 1]
            counts = ends - starts
            offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
            out.append(values[np.arange(int(counts.sum())) + offsets])
        return np.concatenate(out)


def _region(trace: Trace, csr: _Csr, around: int, depth: int) -> np.ndarray:
    """Rows within ``depth`` dependency hops (either direction) of node ``around``."""
    try:
        centre = trace.row_of(around)
    except KeyError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    region = np.zeros(len(trace), dtype=bool)
    region[centre] = True
    frontier = np.array([centre], dtype=np.int64)
    for _ in range(depth):
        nxt = distinct(csr.neighbours(frontier))
        frontier = nxt[~region[nxt]]
        if not len(frontier):
            break
        region[frontier] = True
    return region


def select_subgraph(trace: Trace, *, around: int | None = None, depth: int = 2, filters: Sequence[str] = (),
                    max_nodes: int = 400, critical_rows: set[int] | None = None) -> SubGraph:
    """The rows to draw and the edges between them (see the module docstring)."""
    csr = _Csr.of(trace)
    region = _region(trace, csr, around, depth) if around is not None else np.ones(len(trace), dtype=bool)
    keep = region.copy()
    if filters:
        kinds = node_kinds(trace)
        for f in filters:
            keep &= parse_filter(f)(trace, kinds)
    if around is not None:
        keep[trace.row_of(around)] = True
    rows = np.flatnonzero(keep)
    if len(rows) > max_nodes:
        raise OptionError(_literal(f"{trace.path}: {len(rows)} nodes selected,") + " more than {max_nodes}; narrow "
                          "it with {around} (a node id) and {depth} (hops) or {filters}", max_nodes=max_nodes, around=..., depth=...,
                          filters=...)
    try:
        order = topological_order(trace)
    except DependencyError:  # a cycle: file order still bounds the searches, at worst a shortcut stays
        order = np.arange(len(trace))
    edges = _bridged_edges(csr, order, region, keep)
    kept = set(rows.tolist())
    return SubGraph(trace, rows, _without_shortcuts(sorted(edges), order), (critical_rows or set()) & kept)


def _bridged_edges(csr: _Csr, order: np.ndarray, region: np.ndarray, keep: np.ndarray) -> list[tuple[int, int, bool]]:
    """Edges between kept rows: direct dependencies, and bridges through dropped rows of the region.

    One pass in dependency order carries, for every dropped row, the kept rows above it that it reaches
    through dropped rows only: the latest :data:`_BRIDGE_FAN_IN` of them (older ones are, in practice,
    ancestors of those, so the transitive reduction would drop them anyway; the cap keeps long chains
    that bypass every kept node from growing these sets without bound).
    """
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    nearest: dict[int, frozenset[int]] = {}  # dropped row -> kept rows reached through dropped ones
    empty: frozenset[int] = frozenset()
    edges: set[tuple[int, int, bool]] = set()
    for row in order[region[order]].tolist():
        parents = [p for p in csr.parents_of(row).tolist() if region[p]]
        if keep[row]:
            for p in parents:
                if keep[p]:
                    edges.add((p, row, False))
            for q in {q for p in parents if not keep[p] for q in nearest.get(p, empty)}:
                if (q, row, False) not in edges:
                    edges.add((q, row, True))
        else:
            found = {p for p in parents if keep[p]}
            for p in parents:
                if not keep[p]:
                    found |= nearest.get(p, empty)
            if len(found) > _BRIDGE_FAN_IN:
                found = set(sorted(found, key=lambda q: position[q])[-_BRIDGE_FAN_IN:])
            if found:
                nearest[row] = frozenset(found)
    return sorted(edges)


def _without_shortcuts(edges: list[tuple[int, int, bool]], order: np.ndarray) -> list[tuple[int, int, bool]]:
    """Drop bridged edges implied by a longer path (a transitive reduction of the bridges only)."""
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    children: dict[int, list[int]] = {}
    for p, c, _ in edges:
        children.setdefault(p, []).append(c)

    def reachable_without(p: int, c: int) -> bool:
        limit = position[c]  # a path to c only passes nodes placed before it
        stack = [x for x in children.get(p, []) if x != c and position[x] <= limit]
        seen: set[int] = set()
        while stack:
            x = stack.pop()
            if x == c:
                return True
            if x not in seen:
                seen.add(x)
                stack.extend(y for y in children.get(x, []) if position[y] <= limit)
        return False

    return [(p, c, b) for p, c, b in edges if not (b and reachable_without(p, c))]


def _dot_text(g: SubGraph) -> str:
    kinds = node_kinds(g.trace)
    lines = ["digraph et {", '  rankdir=TB; node [shape=box, style="rounded,filled", fontname="sans-serif", fontsize=10];']
    for row in g.rows.tolist():
        kind = KIND_NAMES[int(kinds[row])]
        label = _dot_escape(f"{g.label(row)}\n{node_type_name(int(g.trace.types[row]))} {int(g.trace.duration[row])} us")
        extra = ', color="#d62728", penwidth=3' if row in g.critical else ""
        lines.append(f'  n{int(g.trace.ids[row])} [label="{label}", fillcolor="{KIND_COLORS[kind]}40"{extra}];')
    for p, c, bridged in g.edges:
        style = []
        if bridged:
            style.append("style=dashed")
        if p in g.critical and c in g.critical:
            style.append('color="#d62728", penwidth=2')
        attrs = f" [{', '.join(style)}]" if style else ""
        lines.append(f"  n{int(g.trace.ids[p])} -> n{int(g.trace.ids[c])}{attrs};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _graphml_text(g: SubGraph) -> str:
    kinds = node_kinds(g.trace)
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">',
           '<key id="name" for="node" attr.name="name" attr.type="string"/>',
           '<key id="type" for="node" attr.name="type" attr.type="string"/>',
           '<key id="kind" for="node" attr.name="kind" attr.type="string"/>',
           '<key id="dur" for="node" attr.name="duration_micros" attr.type="long"/>',
           '<key id="critical" for="all" attr.name="critical" attr.type="boolean"/>',
           '<key id="bridged" for="edge" attr.name="bridged" attr.type="boolean"/>',
           '<graph id="et" edgedefault="directed">']
    for row in g.rows.tolist():
        out.append(f'<node id="n{int(g.trace.ids[row])}"><data key="name">{escape(xml_text(g.trace.name(row)))}</data>'
                   f'<data key="type">{node_type_name(int(g.trace.types[row]))}</data>'
                   f'<data key="kind">{KIND_NAMES[int(kinds[row])]}</data>'
                   f'<data key="dur">{int(g.trace.duration[row])}</data>'
                   f'<data key="critical">{str(row in g.critical).lower()}</data></node>')
    for p, c, bridged in g.edges:
        crit = p in g.critical and c in g.critical
        out.append(f'<edge source="n{int(g.trace.ids[p])}" target="n{int(g.trace.ids[c])}">'
                   f'<data key="bridged">{str(bridged).lower()}</data>'
                   f'<data key="critical">{str(crit).lower()}</data></edge>')
    out += ["</graph>", "</graphml>"]
    return "\n".join(out) + "\n"


def _layers(g: SubGraph) -> dict[int, int]:
    """Depth of every drawn node: 0 for nodes with no drawn parent, else 1 + deepest parent."""
    parents: dict[int, list[int]] = {r: [] for r in g.rows.tolist()}
    for p, c, _ in g.edges:
        parents[c].append(p)
    depth: dict[int, int] = {}

    def visit(row: int) -> int:
        stack = [row]
        while stack:
            r = stack[-1]
            pending = [p for p in parents[r] if p not in depth]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            depth[r] = 1 + max((depth[p] for p in parents[r]), default=-1)
        return depth[row]

    for r in g.rows.tolist():
        if r not in depth:
            visit(r)
    return depth


def _render_matplotlib(g: SubGraph, path: Path, fmt: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba
    from matplotlib.patches import FancyBboxPatch

    kinds = node_kinds(g.trace)
    depth = _layers(g)
    by_layer: dict[int, list[int]] = {}
    for r in g.rows.tolist():
        by_layer.setdefault(depth[r], []).append(r)
    width = max((len(v) for v in by_layer.values()), default=1)
    pos = {r: (i - (len(rows) - 1) / 2, -layer) for layer, rows in by_layer.items() for i, r in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(min(2.2 * width + 1, 60), min(1.0 * len(by_layer) + 1, 60)))
    for p, c, bridged in g.edges:
        crit = p in g.critical and c in g.critical
        ax.annotate("", xy=pos[c], xytext=pos[p], arrowprops={
            "arrowstyle": "->", "color": "#d62728" if crit else "#555", "lw": 2 if crit else 0.8,
            "linestyle": "--" if bridged else "-", "shrinkA": 10, "shrinkB": 10})
    for r, (x, y) in pos.items():
        crit = r in g.critical
        ax.add_patch(FancyBboxPatch((x - 0.45, y - 0.2), 0.9, 0.4, boxstyle="round,pad=0.02",
                                    facecolor=to_rgba(KIND_COLORS[KIND_NAMES[int(kinds[r])]], 0.35),
                                    edgecolor="#d62728" if crit else "#333", linewidth=2.5 if crit else 0.8))
        text = g.label(r)
        ax.text(x, y, text if len(text) <= 28 else text[:27] + "...", ha="center", va="center", fontsize=7)
    xs = [x for x, _ in pos.values()] or [0]
    ys = [y for _, y in pos.values()] or [0]
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.axis("off")
    with atomic_output(path, compress=False) as out:
        fig.savefig(out, format=fmt, bbox_inches="tight", dpi=110)
    plt.close(fig)


def write_graph(trace: Trace, out: str | os.PathLike[str], *, around: int | None = None, depth: int = 2,
                filters: Sequence[str] = (), max_nodes: int = 400, critical_rows: set[int] | None = None,
                fmt: str | None = None) -> tuple[Path, SubGraph, str]:
    """Write the selected sub-graph of ``trace`` to ``out`` (format from ``fmt`` or the suffix).

    Returns the path, the drawn sub-graph and how it was made ("text" for dot/graphml, "graphviz", "matplotlib").
    """
    path = Path(out)
    fmt = (fmt or path.suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        raise UsageError(f"{path}: unknown graph format {fmt!r} (use {', '.join(FORMATS)})")
    g = select_subgraph(trace, around=around, depth=depth, filters=filters, max_nodes=max_nodes,
                        critical_rows=critical_rows)
    if fmt in ("dot", "graphml"):
        text = _dot_text(g) if fmt == "dot" else _graphml_text(g)
        with atomic_output(path, compress=False) as f:
            f.write(text.encode("utf-8"))
        return path, g, "text"
    dot = shutil.which("dot")
    if dot:
        done = subprocess.run([dot, f"-T{fmt}"], input=_dot_text(g).encode("utf-8"), capture_output=True, check=False)
        if done.returncode == 0:
            with atomic_output(path, compress=False) as f:
                f.write(done.stdout)
            return path, g, "graphviz"
    _render_matplotlib(g, path, fmt)
    return path, g, "matplotlib"
