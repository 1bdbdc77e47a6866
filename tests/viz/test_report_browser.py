"""The HTML report in a real browser: headless Chromium loads it with no console errors, the charts are
drawn, and names from the trace cannot inject markup. A screenshot is kept as a test artifact.

Chromium is required (Debian: ``apt-get install -y chromium``); without it these tests fail.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from etkit.viz.report import write_report

from ..analyze.builders import N, build_job, coll, comp

EVIL = '<script>console.error("pwned")</script><img src=x onerror=alert(1)>'
_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0"]


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "headless Chromium is needed for the report tests: apt-get install -y chromium"
    return exe


def _run_chromium(args: list[str], page: Path) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="etkit-chromium-") as profile:
        return subprocess.run([_chromium(), *_FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                              capture_output=True, text=True, timeout=120, check=False)


class _Census(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.svg_classes: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):  # type: ignore[no-untyped-def]
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if tag == "svg":
            self.svg_classes.append(dict(attrs).get("class", ""))

    def handle_data(self, data):  # type: ignore[no-untyped-def]
        self.text.append(data)


_TIME = re.compile(r"(?<![\w.])([+-]?\d[\d,]*(?:\.\d+)?)\s?(ns|us|µs|ms)\b")


def _misfit_units(page: Path) -> tuple[int, list[str]]:
    """Of the times the page shows (text and tooltips): how many there are, and those whose unit does not fit
    their value (1,000 or more of a unit that has a bigger one: "4500 ns" for 4.5 µs)."""
    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.parts: list[str] = []

        def handle_starttag(self, tag, attrs):  # type: ignore[no-untyped-def]
            self.parts.extend(v for k, v in attrs if k == "title" and v)

        def handle_data(self, data):  # type: ignore[no-untyped-def]
            self.parts.append(data)

    text = Text()
    text.feed(page.read_text())
    found = list(_TIME.finditer(" ".join(text.parts)))
    return len(found), [m.group(0) for m in found if abs(float(m.group(1).replace(",", ""))) >= 1000]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    ranks = {r: [comp(1, 100, 10 + 4 * r, name=EVIL if r == 0 else "fwd"),
                 coll(2, 110 + 4 * r, 20, [1], pg="0"), comp(3, 112 + 4 * r, 15, [1], "bwd"),
                 N(4, 2, 140, 3, [2, 3], "load", {"tensor_size": 64}),
                 N(5, 4, 100, 48, [], "ProfilerStep#7", {"tid": 1})] for r in range(4)}
    job = build_job(tmp, ranks, "after")
    baseline = build_job(tmp, {r: [comp(1, 100, 20, name="fwd"), coll(2, 120, 30, [1])] for r in range(4)}, "before")
    return write_report(job, tmp / "report.html", baseline=baseline)


def test_report_is_self_contained_and_escaped(report):
    html = report.read_text()
    assert "<script" not in html and "<img" not in html  # the hostile name is text, not markup
    assert "&lt;script&gt;" in html
    # nothing is fetched: no tag with src/href, no url(), no @import
    assert not re.search(r"<[^>]+\s(src|href)\s*=", html)
    assert "url(" not in html and "@import" not in html


def test_report_units_match_the_values(report):
    shown, misfit = _misfit_units(report)
    assert shown > 20 and misfit == []


def test_report_loads_in_chromium_without_errors_and_draws_charts(report):
    done = _run_chromium(["--dump-dom"], report)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    assert "net::ERR" not in done.stderr
    census = _Census()
    census.feed(done.stdout)
    assert census.tags.get("script", 0) == 0 and census.tags.get("img", 0) == 0
    for chart in ("stacked-bars", "gantt", "heatmap", "bar-chart"):
        assert any(chart in c for c in census.svg_classes), (chart, census.svg_classes)
    assert census.tags.get("rect", 0) >= 4 * 4 + 16  # timeline boxes and the 4x4 heat map at least
    text = " ".join(census.text)
    for heading in ("time breakdown", "timeline", "communication", "critical path", "diff:"):
        assert heading in text
    assert EVIL in text


def test_report_screenshot(report, tmp_path):
    # the artifact lives in pytest's managed temp folder (it keeps the last few runs' and prunes older ones)
    shot = tmp_path / "report.png"
    done = _run_chromium([f"--screenshot={shot}", "--window-size=1200,2400", "--hide-scrollbars"], report)
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page compresses far smaller
    print(f"report screenshot: {shot}")


@pytest.mark.shared_data
def test_report_of_a_converted_pytorch_job_in_chromium(tmp_path):
    from etkit.executor import SerialExecutor
    from etkit.model.job import load_job
    from etkit.pytorch.job import convert_job

    from ..conftest import PYTORCH_JOBS

    for name in ("tp_transformer_ws2", "pp_sendrecv_ws2"):
        convert_job(PYTORCH_JOBS / name, tmp_path / name, executor=SerialExecutor())
    job = load_job(tmp_path / "tp_transformer_ws2", executor=SerialExecutor())
    other = load_job(tmp_path / "pp_sendrecv_ws2", executor=SerialExecutor())
    page = write_report(job, tmp_path / "tp.html", baseline=other, iteration=0)
    text = page.read_text()
    assert "ProfilerStep#2 (1 of 2 steps)" in text  # iteration 0 is the first profiled step
    done = _run_chromium(["--dump-dom"], page)
    assert done.returncode == 0
    assert [line for line in done.stderr.splitlines() if ":CONSOLE" in line] == []
    census = _Census()
    census.feed(done.stdout)
    assert len([c for c in census.svg_classes if c.startswith("chart")]) >= 8
    assert census.tags.get("rect", 0) > 200  # the step's ops on the timeline


def test_report_iteration_out_of_range_is_a_usage_error(tmp_path):
    from etkit.errors import UsageError

    job = build_job(tmp_path, {0: [N(1, 4, 100, 50, [], "ProfilerStep#1", {"tid": 1}), comp(2, 110, 10, [1], "op")]})
    assert "ProfilerStep#1 (1 of 1 steps)" in write_report(job, tmp_path / "ok.html", iteration=-1).read_text()
    with pytest.raises(UsageError, match="iteration 3 out of range"):
        write_report(job, tmp_path / "r.html", iteration=3)


def _simulated_llm_report(tmp_path: Path, name: str, **layout) -> tuple[Path, object]:
    from etkit.analyze.timing import schedule_from_simulation
    from etkit.generate import llm

    job = llm(model="llama3-70b", layers=4, microbatches=4, **layout).to_job()
    schedule = schedule_from_simulation(job, None, None, preset="hgx-h100")
    return write_report(job, tmp_path / f"{name}.html", schedule=schedule, title=f"{name} ranks"), job


def _census_of(page: Path) -> _Census:
    done = _run_chromium(["--dump-dom"], page)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line] == []
    census = _Census()
    census.feed(done.stdout)
    return census


def _screenshot(page: Path, shot: Path) -> None:
    done = _run_chromium([f"--screenshot={shot}", "--window-size=1200,3000", "--hide-scrollbars"], page)
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"report screenshot: {shot}")


def test_report_at_8_ranks_draws_every_rank_with_a_colour_scale(tmp_path):
    page, job = _simulated_llm_report(tmp_path, "8", dp=2, tp=2, pp=2)
    html = page.read_text()
    census = _census_of(page)
    text = " ".join(census.text)
    assert all(f"rank {r}" in text for r in range(8)) and "class 0" not in text
    assert "scale (bytes)" in text and html.count('class="scale"') == 10  # the heat map's colour scale
    assert "waiting" in text and "exposed comm" in text
    shown, misfit = _misfit_units(page)
    assert shown > 100 and misfit == []
    _screenshot(page, tmp_path / "report-8.png")


def test_report_at_1024_ranks_shows_classes_distributions_and_blocks(tmp_path):
    page, job = _simulated_llm_report(tmp_path, "1024", dp=32, tp=8, pp=4)
    html = page.read_text()
    assert len(html) < 3_000_000  # a page a browser opens at once, whatever the rank count
    census = _census_of(page)
    text = " ".join(census.text)
    assert "1024 ranks in 4 role classes" in text
    for c in range(4):
        assert f"class {c}" in text
    assert "rank 1023" not in text.replace("1023)", "")  # no per-rank rows: classes with their ranges
    assert "each cell sums a block of consecutive ranks" in text and "scale (bytes)" in text
    assert census.tags.get("rect", 0) < 64 * 64 + 6000 + 500
    assert "the first rank of each of the 4 role classes" in text  # the timeline: one rank per class
    assert "no stragglers" not in text and "0 straggler(s)" in text
    shown, misfit = _misfit_units(page)
    assert shown > 100 and misfit == []
    _screenshot(page, tmp_path / "report-1024.png")
