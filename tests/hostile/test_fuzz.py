"""Property-based fuzzing of every reader of untrusted files: a result or one clean :class:`EtkitError`
naming the file, never another exception. Derandomized (same examples every run), no deadline.

- 2,000 mutants of an ``.et`` file (byte edits, insertions, cuts, some gzip-wrapped) through the
  whole-file loader (as analysis and validation load), the streaming reader, the groups a job declares,
  and the JSON twin;
- 500 mutants of a real PyTorch host trace (hostile values put at any place of its JSON) through the host
  reader, the linker and the converter;
- comm-group files and Python-literal strings.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etkit.errors import EtkitError
from etkit.format.schema import CommType, GlobalMetadata, NodeType
from etkit.format.stream import write_trace

from ..builders import coll, node, recv, send
from .helpers import PP_JOB


def _settings(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


_SCRATCH: dict[int, Path] = {}


def _scratch(factory: pytest.TempPathFactory) -> Path:
    """One folder for every example of the session (each example overwrites its file): making a folder per
    example would cost more than reading the mutant."""
    if id(factory) not in _SCRATCH:
        _SCRATCH[id(factory)] = factory.mktemp("fuzz")
    return _SCRATCH[id(factory)]


def _clean(exc: EtkitError, path: Path) -> None:
    text = str(exc)
    assert str(path) in text and "\n" not in text, text


# -- .et -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def et_seed(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A small trace with every kind of field a reader decodes: metadata attributes, comm attributes,
    point-to-point peers, data and control deps, IOInfo, a ``process_group:init`` payload."""
    from etkit.format.attrs import make_attr

    meta = GlobalMetadata(version="1.0.0")
    meta.attr.extend([make_attr("producer", "fuzz"), make_attr("world", 2), make_attr("ratio", 0.5)])
    init = node(9, NodeType.METADATA_NODE, name="## process_group:init ##")
    init.inputs.values = str(['[{"pg_name": "0", "ranks": [0, 1]}, {"pg_name": "7", "ranks": [1]}]'])
    mm = node(1, duration=3, start=10, name="aten::mm")
    mm.inputs.values, mm.inputs.shapes, mm.inputs.types = "[[1, 2, 0, 4, 4, 'cpu']]", "[[2, 2]]", "['Tensor(float)']"
    nodes = [mm, coll(2, CommType.ALL_REDUCE, 4096, deps=[1], pg="7", duration=5, start=14),
             send(3, 0, 1, 64, 5, deps=[2]), recv(4, 1, 0, 64, 5, deps=[3]),
             node(5, deps=[4], ctrl=[1], duration=2, tensor_size=2**40), init]
    path = tmp_path_factory.mktemp("seed") / "seed.et"
    write_trace(path, meta, nodes)
    return path.read_bytes()


def _read_every_way(path: Path, variant: int) -> None:
    """The whole-file loader (as analysis loads, or as validation does: empty records kept, names left),
    the groups the trace declares, and one streaming reader in turn (records, or the JSON twin)."""
    from etkit.format.jsontwin import to_json
    from etkit.format.stream import open_trace
    from etkit.model.job import groups_from_trace
    from etkit.model.trace import load_trace

    try:
        trace = load_trace(path, allow_empty=bool(variant & 1), names=not variant & 1)
        for row in range(len(trace)):
            trace.node(row)
        groups_from_trace(trace)
    except EtkitError as exc:
        _clean(exc, path)
    try:
        if variant & 2:
            to_json(path, path.with_suffix(".json"))
        else:
            with open_trace(path) as reader:
                for _ in reader:
                    pass
    except EtkitError as exc:
        _clean(exc, path)


_EDIT = st.tuples(st.sampled_from(["set", "insert", "delete"]), st.integers(0, 4096), st.integers(0, 255))


@_settings(2000)
@given(edits=st.lists(_EDIT, min_size=1, max_size=8), cut=st.integers(0, 4096), gz=st.booleans())
def test_et_mutants(tmp_path_factory, et_seed: bytes, edits, cut: int, gz: bool) -> None:  # type: ignore[no-untyped-def]
    data = bytearray(et_seed)
    for op, pos, value in edits:
        at = pos % (len(data) + 1)
        if op == "set" and data:
            data[at % len(data)] = value
        elif op == "insert":
            data[at:at] = bytes([value])
        elif data:
            del data[at % len(data)]
    body = bytes(data[: max(1, cut % (len(data) + 1))]) if cut % 7 == 0 else bytes(data)
    path = _scratch(tmp_path_factory) / ("m.et.gz" if gz else "m.et")
    path.write_bytes(gzip.compress(body, mtime=0)[: len(body) + 20 - (cut % 3)] if gz else body)
    _read_every_way(path, cut % 4)


# -- host traces ----------------------------------------------------------------------------------------

#: Values put into a host trace: wrong types, out-of-range numbers, hostile strings and literals.
HOSTILE_VALUES = [None, True, -1, 0, 2**63, 2**64 - 1, -(2**63) - 1, 1.5, 1e308, -1e308, float("nan"), "", "x\x1b[2J",
                  "[1, (2, [3])]", "{(1,[2]):3}", "['\\U7fffffff']", "9" * 5000, "[" * 300, [], {}, [[[]]],
                  {"name": "rf_id", "type": "uint64", "value": 2**64 - 1}, ["aten::mm"], [None, None],
                  {"values": "x", "shapes": 3, "types": None}]


@pytest.fixture(scope="module")
def host_seed() -> tuple[str, list[tuple]]:
    """The rank-0 host trace of a real 2-rank pipeline job, cut to its first 40 nodes (and its
    ``process_group:init``) so that a mutant converts in milliseconds; as JSON text (each example parses its own
    copy: cheaper than ``copy.deepcopy``) with the places of the unmutated document."""
    doc = json.loads((PP_JOB / "rank-0.et.json").read_text())
    keep = doc["nodes"][:40] + [n for n in doc["nodes"][40:] if "process_group:init" in n["name"]]
    doc = {**doc, "nodes": keep}
    return json.dumps(doc), _paths(doc)


def _paths(value: Any) -> list[tuple]:
    """Every place in a JSON document, as a key path (depth first, a list's first 8 items)."""
    out: list[tuple] = []
    stack: list[tuple[tuple, Any]] = [((), value)]
    while stack:
        prefix, value = stack.pop()
        out.append(prefix)
        if isinstance(value, dict):
            stack.extend((prefix + (k,), v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((prefix + (i,), value[i]) for i in reversed(range(min(8, len(value)))))
    return out


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


@pytest.mark.shared_data
@_settings(500)
@given(data=st.data())
def test_host_trace_mutants(tmp_path_factory, host_seed: tuple[str, list[tuple]], data) -> None:  # type: ignore[no-untyped-def]
    from etkit.pytorch.convert import convert_linked
    from etkit.pytorch.host import load_host_trace
    from etkit.pytorch.link import link

    seed, places = host_seed
    doc = json.loads(seed)
    for k in range(data.draw(st.integers(1, 4))):
        if k:
            places = _paths(doc)  # an earlier mutation may have added or removed places
        place = data.draw(st.sampled_from(places))
        try:
            doc = _set(doc, place, copy.deepcopy(data.draw(st.sampled_from(HOSTILE_VALUES))))
        except (KeyError, IndexError, TypeError):
            pass  # the place went away with an earlier mutation
    folder = _scratch(tmp_path_factory)
    path = folder / "rank-0.et.json"
    text = json.dumps(doc, allow_nan=True).encode()
    if data.draw(st.booleans()):  # now and then, damage the text itself
        at = data.draw(st.integers(0, len(text)))
        text = text[:at] + data.draw(st.binary(max_size=4)) + text[at + 1:]
    path.write_bytes(text)
    try:
        convert_linked(link(load_host_trace(path, rank=0), None), folder / "out.0.et", rank=0)
    except EtkitError as exc:
        assert "\n" not in str(exc), str(exc)


# -- comm groups and literals ----------------------------------------------------------------------------

_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) |
                     st.text(max_size=4), lambda inner: st.lists(inner, max_size=4) |
                     st.dictionaries(st.text(max_size=3), inner, max_size=4), max_leaves=16)


@_settings(120)
@given(doc=_JSON)
def test_comm_group_file_mutants(tmp_path_factory, doc) -> None:  # type: ignore[no-untyped-def]
    from etkit.model.groups import ProcessGroups

    path = _scratch(tmp_path_factory) / "g.json"
    try:
        text = json.dumps(doc)
    except (TypeError, ValueError):
        return
    path.write_text(text)
    try:
        groups = ProcessGroups.load(path)
    except EtkitError as exc:
        _clean(exc, path)
        return
    for ranks in groups.groups.values():
        assert all(type(r) is int and r >= 0 for r in ranks) and len(set(ranks)) == len(ranks)


_LITERAL_ALPHABET = st.sampled_from(list("[](){},:'\" 0123456789.-+eEjJxuU\\") +
                                    ["True", "None", "null", "nan", "inf", "\\U7fffffff", "\\ud800", "\\x41",
                                     "9" * 60, "'pg_name'", "1e999"])


@_settings(500)
@given(pieces=st.lists(_LITERAL_ALPHABET, max_size=40))
def test_literal_mutants(pieces: list[str]) -> None:
    from etkit.literal import LiteralError, parse_literal

    try:
        parse_literal("".join(pieces), what="here")
    except LiteralError as exc:
        assert str(exc).startswith("here: ") and "\n" not in str(exc)
