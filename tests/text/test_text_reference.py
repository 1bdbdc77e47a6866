"""Text conversion equals the reference converter's output (up to ids) for every reference file."""

from __future__ import annotations

import pytest

from etkit.model import load_trace
from etkit.text import convert_text, read_text
from etkit.validate import validate_job

from ..conftest import UPSTREAM
from .graphs import canonical, labels

TEXT_DIR = UPSTREAM / "mlcommons-chakra" / "eg_converter" / "input_files" / "Text"
ASTRA_DIR = UPSTREAM / "astra-sim-astra-sim" / "inputs" / "workload" / "ASTRA-sim-1.0"
REFERENCE = UPSTREAM / "generated-by-upstream-chakra-21585d8" / "text_converter_npus4_passes1"
REFERENCE_NAMES = sorted({p.name.rsplit(".", 2)[0] for p in REFERENCE.glob("*.et")}) if REFERENCE.is_dir() else []


@pytest.mark.shared_data
def test_every_reference_file_is_covered() -> None:
    assert len(REFERENCE_NAMES) == 25
    assert all((TEXT_DIR / f"{name}.txt").is_file() for name in REFERENCE_NAMES)


@pytest.mark.shared_data
@pytest.mark.parametrize("name", REFERENCE_NAMES)
def test_graph_equals_reference(name: str) -> None:
    job = convert_text(TEXT_DIR / f"{name}.txt", npus=4, passes=1)
    assert sorted(job.traces) == [0, 1, 2, 3]
    for rank in range(4):
        ref = load_trace(REFERENCE / f"{name}.{rank}.et")
        ours = job.traces[rank]
        assert len(ours) == len(ref)
        assert sorted(labels(ours).values()) == sorted(labels(ref).values())
        assert canonical(ours) == canonical(ref)
        assert len(ours.ctrl_deps) == 0
    assert not job.groups.groups
    report = validate_job(job)
    assert report.ok, [(f.rank, f.rule, f.message) for f in report.findings]


@pytest.mark.shared_data
def test_canonical_form_tells_graphs_apart() -> None:
    """The comparison above can fail: dropping one edge of a reference graph changes its canonical form."""
    from etkit.format.schema import Node
    from etkit.model import Trace

    ref = load_trace(REFERENCE / "MLP_ModelParallel.0.et")
    nodes = [Node.FromString(r) for r in ref.records()]
    edited = next(n for n in nodes if len(n.data_deps) == 2)
    del edited.data_deps[-1]
    assert canonical(Trace.from_nodes(ref.metadata, nodes)) != canonical(ref)


@pytest.mark.shared_data
@pytest.mark.parametrize("path", sorted(ASTRA_DIR.glob("*.txt")) if ASTRA_DIR.is_dir() else [],
                         ids=lambda p: p.name)
def test_astra_sim_inputs_convert_and_validate(path) -> None:
    workload = read_text(path)
    job = convert_text(workload, npus=8, passes=2)
    report = validate_job(job)
    assert report.ok, [(f.rank, f.rule, f.message) for f in report.findings]
    # Whatever the file, every layer has one forward compute per pass (MICRO has only collectives).
    names = [job.traces[0].name(r) for r in range(len(job.traces[0]))]
    forwards = sum(n.endswith("_FWD") for n in names)
    assert forwards == (0 if workload.mode == "MICRO" else 2 * len(workload.layers))
