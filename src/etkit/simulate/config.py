"""Simulator inputs: the network (dimensions, topologies, links), the system (collective algorithms,
chunking, delays, roofline) and what-if knobs, read from ASTRA-sim's files as they are or from one
etkit system YAML with presets.

Units follow ASTRA-sim: bandwidth in GB/s per link, latency in ns per hop, ``local-mem-bw`` in GB/s,
``peak-perf`` in TFLOP/s. ASTRA-sim's analytical network turns a link's GB/s into bytes per ns as
``GB/s * 2**30 / 1e9`` and floors every transfer to whole nanoseconds; the parity tests against its
reference results depend on both, so :data:`BYTES_PER_NS_PER_GBPS` keeps that factor.
"""

from __future__ import annotations

import json
import math
from dataclasses import field, replace
from pathlib import Path
from typing import Any

import yaml

from ..errors import EtkitError, OptionError, UsageError
from ..filekind import require
from ..format.schema import CommType
from ..model.devices import DEVICES, Device, get_device
from ..records import record
from ..suggest import warn_unknown_keys

__all__ = ["Dimension", "NetworkConfig", "SystemConfig", "Knobs", "SimConfig", "PRESETS", "TOPOLOGIES",
           "ALGORITHMS", "BYTES_PER_NS_PER_GBPS", "load_network", "load_system", "load_etkit_system",
           "load_config", "check_number", "MAX_SPLITS", "MAX_CONFIG_BYTES"]

#: Link bytes per ns for 1 GB/s, as ASTRA-sim's analytical backend converts it (GiB-based).
BYTES_PER_NS_PER_GBPS = 2 ** 30 / 1e9
TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
#: ASTRA-sim's collective implementations (``direct`` and ``oneDirect`` also take a window: ``direct8``).
ALGORITHMS = ("ring", "direct", "halvingDoubling", "doubleBinaryTree", "oneRing", "oneDirect", "oneHalvingDoubling")
_ALGORITHM_ALIASES = {"hierarchicalRing": "ring", "halvingdoubling": "halvingDoubling",
                      "doublebinarytree": "doubleBinaryTree"}
#: Most chunks a collective may be cut into (``preferred-dataset-splits``) or run at once per dimension:
#: a simulation's cost grows with them, and no real system uses more.
MAX_SPLITS = 4096
#: Largest configuration file read (a network or system description is a few hundred bytes).
MAX_CONFIG_BYTES = 1 << 20


def check_number(value: Any, what: str, *, minimum: float = 0.0, inclusive: bool = False, integer: bool = False,
                 maximum: float | None = None) -> float:
    """``value`` as a finite number above ``minimum`` (``inclusive``: at least it), a whole one when
    ``integer``, at most ``maximum``; else an :class:`EtkitError` naming ``what`` (e.g. "net.yml:
    bandwidth of dimension 0"). For every simulator input, and the sweeps of :mod:`etkit.simulate.whatif`."""
    if isinstance(value, bool) or value is None:
        raise EtkitError(f"{what} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise EtkitError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise EtkitError(f"{what} must be a finite number, got {value!r}")
    low = number < minimum if inclusive else number <= minimum
    if low:
        bound = f"at least {minimum:g}" if inclusive else ("positive" if minimum == 0 else f"above {minimum:g}")
        raise EtkitError(f"{what} must be {bound}, got {value!r}")
    if integer and number != int(number):
        raise EtkitError(f"{what} must be a whole number, got {value!r}")
    if maximum is not None and number > maximum:
        raise EtkitError(f"{what} must be at most {maximum:g}, got {value!r}")
    return float(int(number)) if integer else number


@record(frozen=True)
class Dimension:
    """One network dimension: ``npus`` NPUs joined by ``topology`` links of ``bandwidth_gbps`` and ``latency_ns``."""

    topology: str
    npus: int
    bandwidth_gbps: float
    latency_ns: float

    @property
    def bytes_per_ns(self) -> float:
        return self.bandwidth_gbps * BYTES_PER_NS_PER_GBPS

    def hops(self, distance: int) -> int:
        """Links a message crosses between two NPUs ``distance`` positions apart in this dimension."""
        if distance == 0:
            return 0
        if self.topology == "Ring":
            return min(distance, self.npus - distance)
        return 2 if self.topology == "Switch" else 1


@record(frozen=True)
class NetworkConfig:
    """Multi-dimensional network; NPU ``r`` sits at coordinates ``r`` in mixed radix, dimension 0 fastest."""

    dims: tuple[Dimension, ...]
    source: str = "<memory>"

    @property
    def npus(self) -> int:
        return math.prod(d.npus for d in self.dims)

    def coords(self, rank: int) -> tuple[int, ...]:
        out = []
        for dim in self.dims:
            out.append(rank % dim.npus)
            rank //= dim.npus
        return tuple(out)

    def scaled(self, bandwidth: float = 1.0, latency: float = 1.0) -> NetworkConfig:
        """Every link ``bandwidth`` times as fast and its latency multiplied by ``latency``."""
        return replace(self, dims=tuple(replace(d, bandwidth_gbps=d.bandwidth_gbps * bandwidth, latency_ns=d.latency_ns * latency)
                                        for d in self.dims))

    def with_npus(self, world: int) -> NetworkConfig:
        """Fill a last dimension declared with 0 NPUs ("as many as needed") for a job of ``world`` ranks."""
        if not self.dims or self.dims[-1].npus:
            return self
        inner = math.prod(d.npus for d in self.dims[:-1])
        last = replace(self.dims[-1], npus=max(1, -(-world // inner)))
        return replace(self, dims=self.dims[:-1] + (last,))

    def to_yaml_dict(self) -> dict[str, list]:
        return {"topology": [d.topology for d in self.dims], "npus_count": [d.npus for d in self.dims],
                "bandwidth": [d.bandwidth_gbps for d in self.dims], "latency": [d.latency_ns for d in self.dims]}


@record(frozen=True)
class SystemConfig:
    """ASTRA-sim system JSON keys that shape timing (names converted to snake case)."""

    scheduling_policy: str = "LIFO"
    endpoint_delay_ns: float = 10.0
    active_chunks_per_dimension: int = 1
    preferred_dataset_splits: int = 1
    all_reduce: tuple[str, ...] = ("ring",)
    all_gather: tuple[str, ...] = ("ring",)
    reduce_scatter: tuple[str, ...] = ("ring",)
    all_to_all: tuple[str, ...] = ("ring",)
    collective_optimization: str = "localBWAware"
    local_mem_bw_gbps: float = 1600.0
    roofline_enabled: bool = False
    peak_perf_tflops: float = 900.0
    #: etkit extension (system key ``etkit-collective-overhead``): fixed ns added once per call, by
    #: CommType name (``ALL_GATHER``, ...) or ``P2P`` for a SEND/RECV message: software cost of a
    #: communication call that no link latency or bandwidth explains (framework, backend threads).
    collective_overhead_ns: tuple[tuple[str, float], ...] = ()
    #: etkit extension (system key ``etkit-collective-residuals``): the recorded spread of a call's
    #: cost around the model, per (CommType name, group size): one vector per recorded instance, ns
    #: per member (member's return minus the last arrival, minus the model's time). When present,
    #: each simulated instance of that type draws one recorded vector (members in random order) and
    #: releases each member at its own time (:func:`etkit.simulate.engine.run_engine`, Monte Carlo).
    collective_residuals_ns: tuple[tuple[str, int, tuple[tuple[float, ...], ...]], ...] = ()
    #: etkit extension (``etkit-comm-slots-per-rank``): communication ops (collectives and SENDs) a rank
    #: runs at once. 1 (ASTRA-sim: one comm op in flight per NPU) unless a backend runs several, as
    #: gloo runs a group's calls on two worker threads (learned by ``etkit calibrate``).
    comm_slots_per_rank: int = 1
    #: etkit extension (``etkit-comm-slots-per-group``): collectives of one process group a rank runs at
    #: once (0: only the per-rank limit). Above 1 a collective's direct dependency on the previous
    #: collective of its group orders their issue, not their completion.
    comm_slots_per_group: int = 0
    #: etkit extension (``etkit-prediction-errors``): relative step-time errors of this calibration's
    #: held-out predictions (each fitted job predicted by the model fitted on the others: predicted /
    #: measured - 1); they give every prediction's interval (:meth:`prediction_interval`).
    prediction_errors: tuple[float, ...] = ()
    source: str = "<defaults>"

    def concurrent_group_calls(self) -> bool:
        """Whether a rank may run two collectives of one group at once."""
        return self.comm_slots_per_rank > 1 and self.comm_slots_per_group != 1

    def prediction_interval(self, step_ns: float) -> tuple[float, float, float] | None:
        """(low ns, high ns, coverage) of the measured step time a prediction ``step_ns`` stands for,
        from the held-out errors (``prediction_errors``): with n of them and m the largest |error|, a
        new job's measured time lies in [step / (1 + m), step / (1 - m)] with probability n / (n + 1)
        when jobs are exchangeable (split conformal prediction); None without errors."""
        if not self.prediction_errors:
            return None
        worst = max(abs(e) for e in self.prediction_errors)
        n = len(self.prediction_errors)
        high = step_ns / (1.0 - worst) if worst < 1.0 else math.inf
        return step_ns / (1.0 + worst), high, n / (n + 1)

    def algorithm(self, family: str, dim: int) -> str:
        """Algorithm of ``family`` (all_reduce, ...) in network dimension ``dim`` (last entry repeats)."""
        algos: tuple[str, ...] = getattr(self, family)
        return algos[min(dim, len(algos) - 1)] if algos else "ring"

    def overhead_ns(self, kind: str) -> float:
        """Fixed cost of one call of ``kind`` (a CommType name or ``P2P``); 0 when not configured."""
        for name, ns in self.collective_overhead_ns:
            if name == kind:
                return ns
        return 0.0

    def residual_vectors(self, kind: str, group: int) -> tuple[tuple[tuple[float, ...], ...], bool]:
        """Recorded residual vectors of ``kind`` calls: those of groups of ``group`` members (and True:
        draw a whole vector), else every member's of any group size as one-member vectors (and False:
        draw each member independently), else none."""
        pooled: list[tuple[float, ...]] = []
        for name, size, vectors in self.collective_residuals_ns:
            if name == kind:
                if size == group:
                    return vectors, True
                pooled.extend((v,) for vec in vectors for v in vec)
        return tuple(pooled), False

    def scaled_overheads(self, factor: float) -> SystemConfig:
        return replace(self, collective_overhead_ns=tuple((k, v * factor) for k, v in self.collective_overhead_ns),
                       collective_residuals_ns=tuple((k, g, tuple(tuple(x * factor for x in vec) for vec in vecs))
                                                     for k, g, vecs in self.collective_residuals_ns))


@record(frozen=True, kw_only=True)
class Knobs:
    """What-if changes applied without editing files (keyword arguments only)."""

    scale_compute: float = 1.0
    scale_bandwidth: float = 1.0
    stragglers: dict[int, float] = field(default_factory=dict)
    device: Device | None = None  # swap: rescale compute from ``trace_device`` to this one
    trace_device: Device | None = None
    congestion: str = "unaware"  # or "aware": concurrent flows share links
    deps: str = "both"  # "both" = data + ctrl deps (ASTRA-sim HEAD); "data" = data deps only
    measured_gaps: bool = True  # measured traces: keep the time between ops of a thread where it happened
    strip_waits: bool = True  # measured traces: drop recorded blocking on comm the simulator models itself
    symmetry: bool = True  # simulate identical ranks once (False: walk every rank, for benchmarks/checks)
    # every link latency (and the per-call overheads of an etkit system) multiplied by this: with
    # scale_bandwidth=10, scale_latency=0.1 makes "a 10x faster network" faster in both terms
    scale_latency: float = 1.0
    # measured traces: each rank enters at its recorded start instead of 0 (off by default: see docs/guide/simulate.md)
    measured_start: bool = False
    # systems with recorded cost residuals (etkit calibrate --from-trace): Monte Carlo runs (the result
    # is the run with the median step time; 0 = one deterministic run without residuals) and their seed
    samples: int = 32
    seed: int = 0

    def compute_factor(self, rank: int) -> float:
        """What every compute and CPU op time of ``rank`` is multiplied by (``scale_compute`` x its straggler
        factor), the measured time between a thread's ops included."""
        return self.scale_compute * self.stragglers.get(rank, 1.0)

    def __post_init__(self) -> None:
        for name in ("scale_compute", "scale_bandwidth"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise OptionError(f"{{{name}}} must be a positive finite number", **{name: value})
        if not (math.isfinite(self.scale_latency) and self.scale_latency >= 0):
            raise OptionError("{scale_latency} must be a finite number not below 0", scale_latency=self.scale_latency)
        if self.congestion not in ("aware", "unaware"):
            raise UsageError(f"congestion mode must be 'aware' or 'unaware', not {self.congestion!r}")
        if self.samples < 0:
            raise UsageError(f"samples must not be negative, not {self.samples}")
        if self.deps not in ("both", "data"):
            raise UsageError(f"deps must be 'both' or 'data', not {self.deps!r}")
        for rank, factor in self.stragglers.items():
            if not math.isfinite(factor) or factor <= 0:
                raise UsageError(f"straggler factor of rank {rank} must be positive")


@record(frozen=True)
class SimConfig:
    network: NetworkConfig
    system: SystemConfig
    knobs: Knobs = field(default_factory=Knobs)


# -- presets -------------------------------------------------------------------------------------

#: NVLink4 switch inside an 8-GPU node (450 GB/s per direction), rail-optimised 400 Gb/s NICs across nodes.
_NVLINK4_RAIL400 = {"topology": ["Switch", "Switch"], "npus_count": [8, 0], "bandwidth": [450.0, 50.0],
                    "latency": [250.0, 2000.0]}

#: etkit system presets: a device and a network. ``npus_count`` 0 in the last dimension = sized to the job.
PRESETS: dict[str, dict[str, Any]] = {
    "hgx-h100": {
        "description": "HGX H100 8-GPU nodes (NVLink4 switch, 450 GB/s per direction) on a rail-optimised "
                       "400 Gb/s fabric (GPU i of every node on rail switch i)",
        "device": "H100",
        "network": _NVLINK4_RAIL400,
        "system": {"all-reduce-implementation": ["ring", "ring"], "all-gather-implementation": ["ring", "ring"],
                   "reduce-scatter-implementation": ["ring", "ring"],
                   "all-to-all-implementation": ["direct", "direct"], "preferred-dataset-splits": 4,
                   "active-chunks-per-dimension": 1, "endpoint-delay": 10, "local-mem-bw": 3350,
                   "peak-perf": 989},
    },
    "hgx-h200": {
        "description": "HGX H200 8-GPU nodes (NVLink4, 450 GB/s) on a rail-optimised 400 Gb/s fabric",
        "device": "H200",
        "network": _NVLINK4_RAIL400,
        "system": {"all-to-all-implementation": ["direct", "direct"], "preferred-dataset-splits": 4,
                   "local-mem-bw": 4800, "peak-perf": 989},
    },
    "hgx-a100": {
        "description": "HGX A100 8-GPU nodes (NVLink3 switch, 300 GB/s per direction) on a rail-optimised "
                       "200 Gb/s fabric",
        "device": "A100",
        "network": {"topology": ["Switch", "Switch"], "npus_count": [8, 0], "bandwidth": [300.0, 25.0],
                    "latency": [300.0, 2500.0]},
        "system": {"all-to-all-implementation": ["direct", "direct"], "preferred-dataset-splits": 4,
                   "local-mem-bw": 2000, "peak-perf": 312},
    },
}


# -- readers -------------------------------------------------------------------------------------

class _NoAliasLoader(yaml.SafeLoader):
    """YAML without aliases: a configuration has no use for them, and nested ones expand exponentially."""

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(f"line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not "
                                 "allowed in a simulator configuration")
        return super().compose_node(parent, index)


def _read_mapping(path: Path, kind: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise EtkitError(f"{path}: cannot read {kind} ({exc.strerror})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise EtkitError(f"{path}: a {kind} larger than {MAX_CONFIG_BYTES >> 20} MiB is not a configuration")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EtkitError(f"{path}: a {kind} must be UTF-8 text (byte {exc.start} is not)") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_NoAliasLoader)
    except json.JSONDecodeError as exc:
        raise EtkitError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        context, opened = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and opened is not None and getattr(exc, "problem", None):
            problem += f" ({context} at line {opened.line + 1}, column {opened.column + 1})"
        raise EtkitError(f"{path}{where}: not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise EtkitError(f"{path}: a {kind} must be a mapping of keys to values")
    return data


def network_from_dict(data: dict[str, Any], source: str) -> NetworkConfig:
    """ASTRA-sim analytical network keys (``topology``, ``npus_count``, ``bandwidth``, ``latency``)."""
    def listed(key: str) -> list:
        value = data.get(key)
        if value is None:
            raise EtkitError(f"{source}: network needs '{key}' (one entry per dimension)")
        return list(value) if isinstance(value, (list, tuple)) else [value]

    warn_unknown_keys(data, NETWORK_KEYS, source, "network")
    topo, npus, bw, lat = (listed(k) for k in ("topology", "npus_count", "bandwidth", "latency"))
    if not len(topo) == len(npus) == len(bw) == len(lat):
        raise EtkitError(f"{source}: topology, npus_count, bandwidth and latency must have one entry per dimension")
    dims = []
    for i, (t, n, b, l) in enumerate(zip(topo, npus, bw, lat)):
        name = next((k for k in TOPOLOGIES if k.lower() == str(t).lower()), None)
        if name is None:
            raise EtkitError(f"{source}: dimension {i} topology {t!r} is not one of {', '.join(TOPOLOGIES)}")
        last = i == len(topo) - 1
        count = check_number(n, f"{source}: npus_count of dimension {i}", minimum=0 if last else 1, inclusive=True,
                             integer=True, maximum=1 << 24)
        dims.append(Dimension(name, int(count), check_number(b, f"{source}: bandwidth of dimension {i} (GB/s)"),
                              check_number(l, f"{source}: latency of dimension {i} (ns)", inclusive=True)))
    return NetworkConfig(tuple(dims), source)


def load_network(path: str | Path) -> NetworkConfig:
    """Read an ASTRA-sim analytical network YAML."""
    path = Path(path)
    require(path, {"astra-network", "yaml", "json", "missing"}, wanted="a network configuration")
    return network_from_dict(_read_mapping(path, "network configuration"), str(path))


def _algorithms(value: Any, source: str, key: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise EtkitError(f"{source}: {key} needs one implementation per network dimension")
    out = []
    for item in items:
        name = _ALGORITHM_ALIASES.get(str(item), str(item))
        base, window = name, ""
        for prefix in ("oneDirect", "direct"):
            if name.startswith(prefix) and name[len(prefix):].isdigit():
                base, window = prefix, name[len(prefix):]
        if base not in ALGORITHMS or (window and int(window) < 1):
            raise EtkitError(f"{source}: {key} {item!r} is not one of {', '.join(ALGORITHMS)} (direct and oneDirect "
                             "take a window too, e.g. direct8)")
        out.append(name)
    if key == "all-to-all-implementation" and any(a.endswith("alvingDoubling") for a in out):
        raise EtkitError(f"{source}: {key}: halving-doubling has no all-to-all (ASTRA-sim exits on it)")
    return tuple(out)


#: Keys of ASTRA-sim's analytical network YAML.
NETWORK_KEYS = ("topology", "npus_count", "bandwidth", "latency")
#: System JSON keys ASTRA-sim reads (astra-sim ``Sys.cc``, 518bd51) or its examples still carry; any other key is
#: ignored there too, so etkit warns about it with the closest known key (a typo such as
#: ``preferred-dataset-split`` would otherwise change nothing, silently).
ASTRA_SYSTEM_KEYS = (
    "scheduling-policy", "collective-optimization", "local-reduction-delay", "active-chunks-per-dimension", "L", "o",
    "g", "G", "endpoint-delay", "model-shared-bus", "preferred-dataset-splits", "peak-perf", "local-mem-bw",
    "roofline-enabled", "trace-enabled", "replay-only", "track-local-mem", "local-mem-trace-filename", "logical-dims",
    "all-reduce-implementation", "all-gather-implementation", "reduce-scatter-implementation",
    "all-to-all-implementation", "all-reduce-implementation-custom", "all-gather-implementation-custom",
    "reduce-scatter-implementation-custom", "all-to-all-implementation-custom", "per-node-custom-implementation",
    "boost-mode", "intra-dimension-scheduling", "inter-dimension-scheduling")

#: System JSON key of the etkit per-call overheads (ASTRA-sim ignores unknown keys, so files stay shared).
OVERHEAD_KEY = "etkit-collective-overhead"
OVERHEAD_KINDS = tuple(c.name for c in CommType) + ("P2P",)
#: System JSON key of the recorded cost residuals: ``{"ALL_GATHER": {"2": [[ns, ns], ...]}, ...}``.
RESIDUALS_KEY = "etkit-collective-residuals"
#: System JSON keys of the comm ops a rank runs at once, and of a calibration's held-out errors.
SLOTS_RANK_KEY = "etkit-comm-slots-per-rank"
SLOTS_GROUP_KEY = "etkit-comm-slots-per-group"
ERRORS_KEY = "etkit-prediction-errors"
SYSTEM_KEYS = (*ASTRA_SYSTEM_KEYS, OVERHEAD_KEY, RESIDUALS_KEY, SLOTS_RANK_KEY, SLOTS_GROUP_KEY, ERRORS_KEY)


def _overheads(value: Any, source: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(value, dict):
        raise EtkitError(f"{source}: {OVERHEAD_KEY} must map a collective ({', '.join(OVERHEAD_KINDS)}) to ns")
    out = []
    for key, ns in value.items():
        name = str(key).upper().replace("-", "_")
        if name not in OVERHEAD_KINDS:
            raise EtkitError(f"{source}: {OVERHEAD_KEY} key {key!r} is not one of {', '.join(OVERHEAD_KINDS)}")
        out.append((name, check_number(ns, f"{source}: {OVERHEAD_KEY}[{key!r}] (ns)", inclusive=True)))
    return tuple(out)


def _residuals(value: Any, source: str) -> tuple[tuple[str, int, tuple[tuple[float, ...], ...]], ...]:
    bad = EtkitError(f"{source}: {RESIDUALS_KEY} must map a collective to {{group size: [[ns per member], ...]}}")
    if not isinstance(value, dict):
        raise bad
    out = []
    for key, by_group in value.items():
        name = str(key).upper().replace("-", "_")
        if name not in OVERHEAD_KINDS or not isinstance(by_group, dict):
            raise bad
        for group, vectors in by_group.items():
            try:
                size = int(group)
                vecs = tuple(tuple(float(x) for x in vec) for vec in vectors)
            except (TypeError, ValueError, OverflowError):
                raise bad from None
            if not all(math.isfinite(x) for vec in vecs for x in vec):
                raise EtkitError(f"{source}: {RESIDUALS_KEY}[{key!r}][{group!r}]: every residual must be a finite number of ns")
            if size < 1 or any(len(v) != size for v in vecs):
                raise EtkitError(f"{source}: {RESIDUALS_KEY}[{key!r}][{group!r}]: every vector needs {group} entries")
            out.append((name, size, vecs))
    return tuple(out)


def system_from_dict(data: dict[str, Any], source: str, base: SystemConfig | None = None) -> SystemConfig:
    """ASTRA-sim system JSON keys over ``base`` (defaults when None); unknown keys are ignored like ASTRA-sim does."""
    cfg = base or SystemConfig()
    warn_unknown_keys(data, SYSTEM_KEYS, source, "system", "ignored (ASTRA-sim ignores it too)")
    updates: dict[str, Any] = {"source": source}
    # (key, attribute, minimum, inclusive, integer, maximum)
    numeric = {"endpoint-delay": ("endpoint_delay_ns", 0.0, True, False, None),
               "active-chunks-per-dimension": ("active_chunks_per_dimension", 1.0, True, True, MAX_SPLITS),
               "preferred-dataset-splits": ("preferred_dataset_splits", 1.0, True, True, MAX_SPLITS),
               "local-mem-bw": ("local_mem_bw_gbps", 0.0, False, False, None),
               "peak-perf": ("peak_perf_tflops", 0.0, False, False, None),
               SLOTS_RANK_KEY: ("comm_slots_per_rank", 1.0, True, True, MAX_SPLITS),
               SLOTS_GROUP_KEY: ("comm_slots_per_group", 0.0, True, True, MAX_SPLITS)}
    for key, (attr, low, inclusive, integer, high) in numeric.items():
        if key in data:
            number = check_number(data[key], f"{source}: {key}", minimum=low, inclusive=inclusive, integer=integer,
                                  maximum=high)
            updates[attr] = int(number) if integer else number
    if "roofline-enabled" in data:
        flag = data["roofline-enabled"]
        if isinstance(flag, bool):
            updates["roofline_enabled"] = flag
        else:
            updates["roofline_enabled"] = check_number(flag, f"{source}: roofline-enabled", inclusive=True) != 0
    for key, attr in (("all-reduce-implementation", "all_reduce"), ("all-gather-implementation", "all_gather"),
                      ("reduce-scatter-implementation", "reduce_scatter"), ("all-to-all-implementation", "all_to_all")):
        if key in data:
            updates[attr] = _algorithms(data[key], source, key)
    for key, attr, allowed in (("scheduling-policy", "scheduling_policy", ("LIFO", "FIFO", "EXPLICIT")),
                               ("collective-optimization", "collective_optimization", ("localBWAware", "baseline"))):
        if key in data:
            if str(data[key]) not in allowed:
                raise EtkitError(f"{source}: {key} {data[key]!r} is not one of {', '.join(allowed)}")
            updates[attr] = str(data[key])
    if OVERHEAD_KEY in data:
        updates["collective_overhead_ns"] = _overheads(data[OVERHEAD_KEY], source)
    if RESIDUALS_KEY in data:
        updates["collective_residuals_ns"] = _residuals(data[RESIDUALS_KEY], source)
    if ERRORS_KEY in data:
        errors = data[ERRORS_KEY]
        if not isinstance(errors, list) or not errors:
            raise EtkitError(f"{source}: {ERRORS_KEY} must be a non-empty list of relative errors (e.g. [-0.04, 0.02])")
        updates["prediction_errors"] = tuple(check_number(e, f"{source}: {ERRORS_KEY}[{i}]", minimum=-1.0, inclusive=False)
                                             for i, e in enumerate(errors))
    return replace(cfg, **updates)


def load_system(path: str | Path) -> SystemConfig:
    """Read an ASTRA-sim system JSON."""
    path = Path(path)
    require(path, {"astra-system", "yaml", "json", "missing"}, wanted="a system configuration")
    return system_from_dict(_read_mapping(path, "system configuration"), str(path))


def _device_from(value: Any, source: str) -> Device:
    if isinstance(value, dict):
        try:
            return Device(str(value.get("name", "custom")), float(value["peak_tflops"]), float(value["memory_gbps"]),
                          float(value.get("efficiency", 0.5)))
        except (KeyError, TypeError, ValueError):
            raise EtkitError(f"{source}: device needs peak_tflops and memory_gbps") from None
    return get_device(str(value))


def load_etkit_system(path: str | Path | None = None, *, preset: str | None = None) -> tuple[NetworkConfig, SystemConfig, Device | None]:
    """An etkit system file (YAML: ``preset``, ``device``, ``network``, ``system``) or a preset by name.

    Keys in the file override the preset's; ``network`` uses ASTRA-sim's network keys and ``system``
    ASTRA-sim's system JSON keys.
    """
    data: dict[str, Any] = {}
    source = f"preset {preset}" if preset else "<etkit system>"
    if path is not None:
        source = str(path)
        data = _read_mapping(Path(path), "etkit system file")
        warn_unknown_keys(data, ("preset", "device", "network", "system", "description"), source, "etkit system file")
        preset = data.get("preset", preset)
    base: dict[str, Any] = {}
    if preset is not None:
        key = str(preset).lower()
        if key not in PRESETS:
            raise UsageError(f"{source}: unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        base = PRESETS[key]
    net_data = {**base.get("network", {}), **data.get("network", {})}
    if not net_data:
        raise EtkitError(f"{source}: an etkit system file needs 'network' (or a 'preset')")
    network = network_from_dict(net_data, source)
    sys_data = {**base.get("system", {}), **data.get("system", {})}
    device_value = data.get("device", base.get("device"))
    device = _device_from(device_value, source) if device_value is not None else None
    if device is not None:
        sys_data.setdefault("peak-perf", device.peak_tflops)
        sys_data.setdefault("local-mem-bw", device.memory_gbps)
    return network, system_from_dict(sys_data, source), device


def load_config(network: str | Path | None = None, system: str | Path | None = None, *,
                preset: str | None = None) -> tuple[NetworkConfig, SystemConfig, Device | None]:
    """Network + system from whatever the user gave: an etkit system YAML as ``system`` (or ``network``),
    a preset name, or ASTRA-sim's network YAML + system JSON."""
    def is_etkit(p: str | Path | None) -> bool:
        if p is None or Path(p).suffix == ".json":
            return False
        data = _read_mapping(Path(p), "configuration")
        return "network" in data or "preset" in data

    for candidate in (system, network):
        if is_etkit(candidate):
            net, sys_cfg, device = load_etkit_system(candidate)
            if candidate is system and network is not None:
                net = load_network(network)
            if candidate is network and system is not None:
                sys_cfg = load_system(system)
            return net, sys_cfg, device
    if preset is not None and network is None:
        net, sys_cfg, device = load_etkit_system(preset=preset)
        return net, (load_system(system) if system else sys_cfg), device
    if network is None:
        raise UsageError("give a network (ASTRA-sim network YAML), an etkit system YAML or a --preset")
    device = DEVICES.get(PRESETS[preset]["device"]) if preset and preset in PRESETS else None
    return load_network(network), (load_system(system) if system else SystemConfig()), device
