"""What ``etkit anonymize`` keeps, per attribute and per kind of content: the :class:`Policy`.

The default policy is :data:`DEFAULT_POLICY_TEXT` (what ``etkit anonymize --print-policy`` prints and
``docs/guide/share-scale.md`` shows); a user's YAML file overrides any of its keys and leaves the others
at their defaults. Unknown keys are errors (a misspelt ``atributes:`` must not silently keep everything),
and so are unknown values.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
from dataclasses import field, replace
from pathlib import Path
from typing import Any

import yaml

from ..errors import UsageError
from ..records import record

__all__ = ["Policy", "DEFAULT_POLICY_TEXT", "load_policy", "default_policy", "HOT_ATTRIBUTES"]

#: The default policy, as written to users. Every key may be left out of a user's file.
DEFAULT_POLICY_TEXT = """\
# etkit anonymize: the default policy (a policy file may set any of these keys; the others keep these values)
names: class            # node names: class (the op's class: gemm, conv, attention, ...; comm nodes their
                        # collective) | keep
keep_names:             # names kept as they are (shell patterns): PyTorch's iteration markers, which
  - "ProfilerStep#*"    # analyses and calibration use to find the steps, and the CUDA runtime calls
  - cudaLaunchKernel    # that launch kernels and copies (public API names; the GPU launch statistics
  - cudaLaunchKernelExC # find the launches by them)
  - cudaMemcpyAsync
  - cudaMemsetAsync
timestamps: shift       # shift: every rank by the same amount, the earliest timestamp becomes 1 us (0 means
                        # "no timestamp" to Chakra readers) | keep | drop
jitter: 0.0             # durations: 0 = kept; r > 0 = each rank's clock jittered: every gap between two events
                        # (so every duration) times a seeded factor in [1-r, 1+r], no event changes order
seed: 0                 # seed of the jitter (the same seed gives the same bytes)
shapes: keep            # IOInfo shapes: keep | bucket (every dimension rounded up to a power of two) | drop
comm_sizes: keep        # comm_size (and a send/recv's tensor_size): keep | pow2 (rounded up to a power of two)
tensors: renumber       # IOInfo values: renumber (tensor and storage ids renumbered per rank in order of first
                        # use; every other argument, strings and scalars, dropped) | drop
types: drop             # IOInfo types (dtype names, argument kinds): drop | keep
flops: derive           # num_ops of GEMM and convolution ops from their shapes where absent: derive | keep
metadata: drop          # GlobalMetadata attributes (host, pid, times, schema): drop | keep (version is kept)
attributes:             # per node attribute: keep | drop (kept ones are numbers the tools read)
  is_cpu_op: keep
  num_ops: keep
  tensor_size: keep
  comm_type: keep
  comm_size: keep
  comm_src: keep
  comm_dst: keep
  comm_tag: keep
  comm_priority: keep
  pg_name: keep         # renumbered: "0" stays every rank, the others 1, 2, ... by their members
  involved_dim: keep
  tid: keep             # profiled thread and stream: the tracks analyses and the simulator rebuild
  stream: keep
  cat: keep             # the profiler's category (cpu_op, user_annotation, kernel, ...): analyses read it
  ts_ns: keep           # shifted like the timestamps
  dur_ns: keep          # jittered like the durations
other_attributes: drop  # attributes not listed above (rf_id, seq_id, op_schema, fw_parent, scope, ...)
"""

NAME_MODES = ("class", "keep")
TIME_MODES = ("shift", "keep", "drop")
SHAPE_MODES = ("keep", "bucket", "drop")
SIZE_MODES = ("keep", "pow2")
TENSOR_MODES = ("renumber", "drop")
KEEP_DROP = ("keep", "drop")
FLOPS_MODES = ("derive", "keep")

#: Attributes the trace columns hold (read without decoding nodes; see etkit.model.trace).
HOT_ATTRIBUTES = ("is_cpu_op", "num_ops", "tensor_size", "comm_type", "comm_size", "comm_src", "comm_dst",
                  "comm_tag", "comm_priority", "pg_name", "tid", "stream", "cat", "ts_ns", "dur_ns")


@record(frozen=True)
class Policy:
    """What to keep. See :data:`DEFAULT_POLICY_TEXT` for the meaning of each field."""

    names: str = "class"
    keep_names: tuple[str, ...] = ("ProfilerStep#*", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync",
                                   "cudaMemsetAsync")
    timestamps: str = "shift"
    jitter: float = 0.0
    seed: int = 0
    shapes: str = "keep"
    comm_sizes: str = "keep"
    tensors: str = "renumber"
    types: str = "drop"
    flops: str = "derive"
    metadata: str = "drop"
    attributes: dict[str, str] = field(default_factory=dict)
    other_attributes: str = "drop"

    def __post_init__(self) -> None:
        for key, allowed in (("names", NAME_MODES), ("timestamps", TIME_MODES), ("shapes", SHAPE_MODES),
                             ("comm_sizes", SIZE_MODES), ("tensors", TENSOR_MODES), ("types", KEEP_DROP),
                             ("flops", FLOPS_MODES), ("metadata", KEEP_DROP), ("other_attributes", KEEP_DROP)):
            value = getattr(self, key)
            if value not in allowed:
                raise UsageError(f"policy: {key} must be one of {', '.join(allowed)}, not {value!r}")
        for name, action in self.attributes.items():
            if action not in KEEP_DROP:
                raise UsageError(f"policy: attribute {name!r} must be keep or drop, not {action!r}")
        if not 0.0 <= self.jitter < 1.0:
            raise UsageError(f"policy: jitter must be at least 0 and below 1, not {self.jitter}")

    def keeps(self, attribute: str) -> bool:
        """Whether node attribute ``attribute`` is written to the output."""
        return self.attributes.get(attribute, self.other_attributes) == "keep"

    def kept_attributes(self) -> tuple[str, ...]:
        """The kept attributes the trace columns hold (the rest are read from each node's record)."""
        return tuple(a for a in HOT_ATTRIBUTES if self.keeps(a))

    def keeps_other_attributes(self) -> bool:
        """Whether some kept attribute is not a column (so every node's attributes must be read)."""
        listed = any(self.keeps(a) for a in self.attributes if a not in HOT_ATTRIBUTES)
        return listed or self.other_attributes == "keep"

    def keeps_name(self, name: str) -> bool:
        return self.names == "keep" or self.listed_name(name)

    def listed_name(self, name: str) -> bool:
        """Whether ``name`` is one of ``keep_names`` (kept on purpose: the proof does not search for it)."""
        return any(fnmatch.fnmatchcase(name, p) for p in self.keep_names)

    def with_options(self, **changes: Any) -> Policy:
        """This policy with the given fields replaced (None values ignored: options not given)."""
        given = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **given) if given else self

    def to_yaml(self) -> str:
        data = {f: getattr(self, f) for f in _FIELDS}
        data["keep_names"] = list(self.keep_names)
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


_FIELDS = ("names", "keep_names", "timestamps", "jitter", "seed", "shapes", "comm_sizes", "tensors", "types",
           "flops", "metadata", "attributes", "other_attributes")


def _from_mapping(data: dict[str, Any], source: str, base: Policy) -> Policy:
    unknown = [k for k in data if k not in _FIELDS]
    if unknown:
        key = str(unknown[0])
        close = difflib.get_close_matches(key, _FIELDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"{source}: unknown policy key {key!r}{hint}; the keys are those of etkit anonymize --print-policy")
    changes: dict[str, Any] = {}
    for key, value in data.items():
        if key == "attributes":
            if not isinstance(value, dict):
                raise UsageError(f"{source}: attributes must be a mapping of attribute name to keep or drop")
            # YAML reads a bare keep/drop as text, but `on`/`off`-like words as booleans: say which is wrong
            changes[key] = {**base.attributes, **{str(k): _action(v, f"{source}: attribute {k!r}") for k, v in value.items()}}
        elif key == "keep_names":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise UsageError(f"{source}: keep_names must be a list of name patterns")
            changes[key] = tuple(value)
        elif key == "jitter":
            changes[key] = _number(value, float, f"{source}: jitter")
        elif key == "seed":
            changes[key] = _number(value, int, f"{source}: seed")
        else:
            changes[key] = _action(value, f"{source}: {key}")
    try:
        return replace(base, **changes)
    except UsageError as exc:
        raise UsageError(f"{source}: {str(exc).removeprefix('policy: ')}") from None


def _action(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str):
        raise UsageError(f"{where}: expected a word such as keep or drop, not {value!r}")
    return value


def _number(value: Any, kind: type, where: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise UsageError(f"{where}: expected a number, not {value!r}")
    return kind(value)


def default_policy() -> Policy:
    """The policy :data:`DEFAULT_POLICY_TEXT` writes down."""
    return _DEFAULT


def load_policy(path: str | os.PathLike[str] | None) -> Policy:
    """The default policy overlaid with the YAML file ``path`` (None: the default itself)."""
    if path is None:
        return _DEFAULT
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the policy ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise UsageError(f"{path}: not a YAML policy{where}") from None
    if data is None:
        return _DEFAULT
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a policy is a YAML mapping (key: value lines), see etkit anonymize --print-policy")
    return _from_mapping(data, str(path), _DEFAULT)


_DEFAULT = _from_mapping(yaml.safe_load(DEFAULT_POLICY_TEXT), "default policy", Policy())
