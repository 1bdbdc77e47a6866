"""``etkit demo`` (what ``make demo`` runs) end to end, run once as docs/user-guide.md shows it:
``etkit demo -o demo-out -q`` (4 CPU ranks, 2 profiled steps).

Every stage runs for real (spawned gloo ranks, conversion, validation, analysis, three simulations
including the 1,024-GPU LLM, report and timelines; ~40 s of CPU). The checks read the outputs back with
tools independent of the demo's own narration: the ETs through ``validate``, the timelines as plain
JSON, the report as HTML, and the measured step time from the collected Kineto files themselves; and the
narration against the user guide's example (which tests/docs/test_examples.py leaves to this module, so
that the suite collects the 4-rank job once).
"""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.torch]

#: the demo's defaults, as the user guide runs it
RANKS, STEPS = 4, 2
USER_GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"
MS = r"([\d,]+\.\d\d) ms"


def _ms(text: str) -> float:
    return float(text.replace(",", ""))


def _kineto_step_ms(collected: Path) -> float:
    """The measured step, read straight from the collected Kineto files: per rank the summed
    ``ProfilerStep#`` spans (µs), the slowest rank's, per profiled step."""
    slowest = 0.0
    for path in sorted(collected.glob("rank-*.kineto.json")):
        events = orjson.loads(path.read_bytes())["traceEvents"]
        slowest = max(slowest, sum(e["dur"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")))
    return slowest / 1e3 / STEPS


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):  # type: ignore[no-untyped-def]
        self.tags.add(tag)

    def handle_data(self, data):  # type: ignore[no-untyped-def]
        self.parts.append(data)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, str]:
    """Run the demo as the user guide shows it (``make demo`` with ``-q``): the ``etkit`` command, in its own
    process, in a fresh folder; the output folder and what it printed."""
    work = tmp_path_factory.mktemp("demo")
    done = subprocess.run([sys.executable, "-m", "etkit", "demo", "-o", "demo-out", "-q"], cwd=work,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return work / "demo-out", done.stdout


def test_demo_writes_valid_ets_of_every_rank(demo):
    from etkit.executor import SerialExecutor
    from etkit.validate import validate

    out, text = demo
    prefix = out / "et" / "job"
    assert sorted(p.name for p in prefix.parent.glob("job.*.et")) == [f"job.{r}.et" for r in range(RANKS)]
    report = validate(prefix, executor=SerialExecutor())
    assert report.ok and report.ranks == RANKS and report.nodes > 100
    assert not report.errors
    assert "validate: OK (0 errors" in text


def test_demo_report_is_a_page_naming_every_rank(demo):
    out, _ = demo
    for name in ("report.html", "report.faster-network.html"):
        page = _Text()
        page.feed((out / name).read_text())
        assert {"html", "svg", "table"} <= page.tags
        text = " ".join(page.parts)
        for rank in range(RANKS):
            assert f"rank {rank}" in text, (name, rank)
        assert f"rank {RANKS}" not in text
    assert f"etkit demo: tp x {RANKS} ranks" in (out / "report.html").read_text()


def test_demo_timelines_parse_with_one_process_per_rank(demo):
    out, _ = demo
    for name in ("timeline.measured.json", "timeline.faster-network.json"):
        events = orjson.loads((out / name).read_bytes())["traceEvents"]
        processes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
        assert processes == {r: f"rank {r}" for r in range(RANKS)}
        slices = [e for e in events if e.get("ph") == "X"]
        assert {e["pid"] for e in slices} == set(range(RANKS))
        assert all(e["dur"] >= 0 for e in slices)


def test_demo_prints_simulated_against_measured_step(demo):
    out, text = demo
    m = re.search(rf"this machine \(network fitted to the trace\): {MS} per step, measured {MS} \(([+-][\d.]+)%\)", text)
    assert m, text
    simulated, measured, error = _ms(m.group(1)), _ms(m.group(2)), float(m.group(3))
    assert measured == pytest.approx(_kineto_step_ms(out / "collected"), abs=0.006)
    assert simulated > 0
    assert error == pytest.approx((simulated - measured) / measured * 100, abs=0.1)
    faster = re.search(rf"10x faster network .*: {MS} per step", text)
    assert faster and 0 < _ms(faster.group(1)) <= simulated
    assert re.search(rf"= 1,024 H100 GPUs on HGX nodes: {MS} per step", text)
    assert len(list((out / "llm1024").glob("llama3-8b.*.et"))) == 1024


def test_demo_lists_only_outputs_that_exist(demo):
    out, text = demo
    listed = re.findall(r"^ {6}(?:[a-zA-Z(][^/]*?)\s{2,}(demo-out/\S+)$", text, flags=re.M)
    assert len(listed) == 7
    for path in listed:
        assert (out.parent / path).exists(), path
    analysis = (out / "analysis.txt").read_text()
    assert "critical path" in analysis and "time breakdown" in analysis


def test_demo_prints_what_the_user_guide_shows(demo):
    """The user guide's example of the demo (its shown lines, figures as wildcards: a measured run) against this
    run of the same command."""
    from ..docs.test_examples import parse_page, shows

    blocks = [b for b in parse_page(USER_GUIDE.read_text()) if any(c.text.startswith("etkit demo") for c in b.commands)]
    assert len(blocks) == 1 and blocks[0].measured
    (command,) = blocks[0].commands
    assert command.text == "etkit demo -o demo-out -q"
    missing = shows(command.shown, demo[1], measured=True)
    assert missing is None, f"docs/user-guide.md shows {missing!r}; the demo printed:\n{demo[1]}"
