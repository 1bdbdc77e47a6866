"""Every example in README.md and docs/ runs, and prints what the page shows.

Each page (README.md, docs/*.md, docs/guide/*.md: discovered, so new pages are checked too) is one test: its
fenced blocks run in page order in one folder, ``../shared`` reaching the shared data as in the repository.

* A shell block is a session: each ``$ command`` (``\\``-continued lines joined) runs in one bash process (so
  ``$ P=...`` holds for the page), stdout and stderr together, with ``etkit`` being the etkit under test. The
  lines under a command are what it prints: every shown line must appear in its output, in order; a line
  ``...`` skips any lines, and ``...`` inside a line matches any text. Blocks without a ``$`` prompt are
  synopses, not sessions.
* Each ``etkit`` command and python example is a fork of one process that has imported etkit
  (tests/docs/zygote.py: the shell, pipes and exit statuses are unchanged, the ~0.8 s of imports are paid
  once); the first command of each verb and the first python example, in page order, run as real processes
  (:data:`REAL`).
* A ``python`` block runs as a script (after the page's earlier blocks); it must not raise.
* HTML comments in the page steer the run without showing in it: ``<!-- setup: CMD -->`` (one or more lines)
  runs shell commands before the next block, ``<!-- setup-python: CODE -->`` runs code before the next python
  block (a user's ``train_step``), ``<!-- example: measured -->`` before a block compares its output
  with every number as a wildcard (timings of a real run), ``<!-- example: skip REASON -->`` leaves the next
  block out, saying why (a GPU, a cluster, a benchmark that runs for minutes).
* Pages whose examples spawn PyTorch ranks (collect, replay, calibrate) are marked slow; the user guide's demo is
  run and compared with its page by tests/cli/test_demo.py (one 4-rank collection for both).

After a change that moves figures, ``python -m tests.docs.test_examples docs/guide/PAGE.md`` rewrites the shown
lines that changed with what the commands print now (lines of the same shape only: read the diff).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..conftest import REPO, SHARED_DATA
from . import zygote

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "guide").glob("*.md"))]
#: Pages whose examples start PyTorch processes (collect, replay, calibrate --ranks): tens of seconds. (The user
#: guide's demo is run, and compared with the page, by tests/cli/test_demo.py.)
SLOW_PAGES = {"pytorch.md", "replay.md", "simulate.md"}
SHELL_LANGS = {"", "text", "console", "bash", "shell", "sh"}
_FENCE = re.compile(r"(?ms)^```(\w*)[^\n]*\n(.*?)^```[ \t]*$")
_COMMENT = re.compile(r"(?s)<!--\s*(setup-python|setup|example)\s*:?(.*?)-->")


@dataclass
class Command:
    text: str
    shown: list[str]
    line: int


@dataclass
class Block:
    lang: str
    line: int
    body: str
    setup: list[str] = field(default_factory=list)
    prelude: str = ""  # python run before a python block (setup-python)
    measured: bool = False
    skip: str | None = None
    commands: list[Command] = field(default_factory=list)


def parse_page(text: str) -> list[Block]:
    """The runnable blocks of a page, with the directives of the comments before each."""
    blocks, pending, pos = [], [], 0
    events = sorted([(m.start(), "comment", m) for m in _COMMENT.finditer(text)]
                    + [(m.start(), "fence", m) for m in _FENCE.finditer(text)], key=lambda e: e[0])
    directives: dict = {"setup": [], "prelude": "", "measured": False, "skip": None}
    for start, kind, m in events:
        if start < pos:
            continue  # a comment inside a fence
        if kind == "comment":
            what, rest = m.group(1), m.group(2).strip()
            if what == "setup-python":
                directives["prelude"] += m.group(2).strip("\n") + "\n"
            elif what == "setup":
                directives["setup"].extend(x for x in rest.splitlines() if x.strip())
            elif rest == "measured":
                directives["measured"] = True
            elif rest.startswith("skip"):
                directives["skip"] = rest[4:].strip() or "no reason given"
            continue
        pos = m.end()
        lang, body = m.group(1).lower(), m.group(2)
        line = text.count("\n", 0, start) + 1
        block = Block(lang, line, body, directives["setup"], directives["prelude"], directives["measured"],
                      directives["skip"])
        directives = {"setup": [], "prelude": "", "measured": False, "skip": None}
        if lang in SHELL_LANGS:
            block.commands = _commands(body, line)
            if not block.commands and not block.setup:
                continue
        elif lang != "python":
            continue
        blocks.append(block)
    del pending
    return blocks


def _commands(body: str, first_line: int) -> list[Command]:
    out: list[Command] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            if out:
                out[-1].shown.append(lines[i])
            i += 1
            continue
        text, line = lines[i][2:], first_line + 1 + i
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1] + " " + lines[i].strip()
        out.append(Command(text, [], line))
        i += 1
    return out


def _norm(line: str) -> str:
    return " ".join(line.split())


#: Figures no run repeats, always wildcards: wall-clock times and rates ("in 0.65 s", "8,040 nodes/s") and what
#: counts the folders of the run's own path (anonymize's "searched in every output byte: 244").
_WALL = re.compile(r"\bin \d+(?:\.\d+)? s\b|\b\d[\d,]*(?:\.\d+)? nodes/s\b|(?<=searched in every output byte: )[\d,]+")


def _pattern(shown: str, measured: bool) -> re.Pattern[str]:
    parts = [re.escape(p) for p in _WALL.sub("...", _norm(shown)).split("...")]
    if measured:
        # a measured difference changes sign from run to run too: "(+0.1%)" shown, "(-6.3%)" printed
        parts = [re.sub(r"(?:\\[-+])?\d[\d,]*(?:\\\.\d+)?", r"[-+]?[\\d,]+(?:\\.\\d+)?", p) for p in parts]
    return re.compile("^" + ".*".join(parts) + "$")


def shows(shown: list[str], printed: str, measured: bool) -> str | None:
    """None when ``printed`` contains the ``shown`` lines in order (``...`` skipping), else what is missing."""
    actual = [_norm(x) for x in printed.splitlines()]
    at = 0
    for want in shown:
        if _norm(want) in ("", "..."):
            continue
        pattern = _pattern(want, measured)
        while at < len(actual) and not pattern.match(actual[at]):
            at += 1
        if at == len(actual):
            return want
        at += 1
    return None


@pytest.fixture(scope="session")
def bin_dir(tmp_path_factory) -> Iterator[Path]:
    """A folder with ``etkit`` (this interpreter, this checkout: the client of a pre-imported etkit,
    tests/docs/zygote.py) and ``python`` for the examples' PATH."""
    out = tmp_path_factory.mktemp("bin")
    home = Path(tempfile.mkdtemp(prefix="etkit-docs-"))  # a short path: a Unix socket's is at most 107 bytes
    sock = home / "etkit.sock"
    log = home / "server.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]), "COLUMNS": "200"}
    with log.open("wb") as sink:
        server = subprocess.Popen([sys.executable, "-m", "tests.docs.zygote", str(sock), str(os.getpid())],
                                  cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # its imports: seconds, minutes on a loaded machine
        while not sock.exists():
            if server.poll() is not None or time.monotonic() > deadline:  # the client falls back to real processes
                warnings.warn(f"the docs' etkit server did not start, the examples run as new processes (slower): "
                              f"{log.read_text()[-2000:]}", stacklevel=1)
                server.kill()
                break
            time.sleep(0.05)
        for name in ("etkit", "python"):
            (out / name).write_text(zygote.CLIENT.format(python=sys.executable, socket=str(sock)))
        for p in out.iterdir():
            p.chmod(0o755)
        yield out
    finally:
        server.terminate()  # it waits for the commands still running (so their CPU is counted), then ends
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(home, ignore_errors=True)


#: ``etkit VERB`` in a command of a page.
_VERB = re.compile(r"(?:^|[\s;|&(])etkit\s+([a-z][\w-]*)")


def real_commands(pages: list[Path]) -> set[tuple[str, int]]:
    """(page, line) of the commands that run as real ``python -m etkit`` processes rather than forks of the
    pre-imported server: the first command of each verb, in page order (proving the program starts), and the
    first python example."""
    seen: set[str] = set()
    real = set()
    for page in pages:
        for block in parse_page(page.read_text()):
            if block.skip is None and block.lang == "python" and "python" not in seen:
                seen.add("python")  # and the first python example
                real.add((page.name, block.line))
            if block.skip is not None or block.lang == "python":
                continue
            for cmd in block.commands:
                verbs = set(_VERB.findall(cmd.text)) - seen
                if verbs:
                    seen |= verbs
                    real.add((page.name, cmd.line))
    return real


REAL = real_commands(PAGES)


def _as_real(cmd: str) -> str:
    """``cmd`` with its etkit commands run as real processes (the exit status kept for ``$?``)."""
    return f"export ETKIT_EXAMPLE_REAL=1\n{cmd}\n__status=$?; unset ETKIT_EXAMPLE_REAL; (exit $__status)"


def _run_shell(script: list[str], cwd: Path, env: dict[str, str], timeout: float) -> list[str]:
    """Run the commands in one bash, returning each one's output (stdout + stderr)."""
    marker = "@@etkit-example-output@@"
    body = "\n".join(f"echo; echo '{marker}'\n{{\n{cmd}\n}} 2>&1" for cmd in script) + f"\necho; echo '{marker}'\n"
    done = subprocess.run(["bash", "-c", body], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    parts = done.stdout.split(marker + "\n")
    return parts[1:len(script) + 1] + [""] * (len(script) - len(parts[1:len(script) + 1]))


@pytest.mark.shared_data
@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_PAGES else p
                                  for p in PAGES], ids=[p.name for p in PAGES])
def test_the_examples_print_what_the_page_shows(page, bin_dir, tmp_path):
    blocks = parse_page(page.read_text())
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "200",
           "PYTHONPATH": str(REPO / "src")}
    env.pop("ETKIT_EXECUTOR", None)
    rel = page.relative_to(REPO)
    session: list[str] = []  # every command so far, replayed for the variables (each block runs anew)
    problems = []
    for block in blocks:
        if block.skip is not None:
            continue
        setup = list(block.setup)
        if block.lang == "python":
            script = cwd / f"example_{block.line}.py"
            script.write_text(block.prelude + block.body)
            setup_out = _run_shell(setup, cwd, env, 600) if setup else []
            done = subprocess.run([str(bin_dir / "python"), script.name], cwd=cwd, capture_output=True, text=True,
                                  env={**env, "ETKIT_EXAMPLE_REAL": "1"} if (page.name, block.line) in REAL else env,
                                  timeout=600)
            if done.returncode != 0:
                tail = (done.stderr.strip().splitlines() or ["?"])[-1]
                problems.append(f"{rel}:{block.line}: the python example fails: {tail} {''.join(setup_out)[-300:]}")
            continue
        assigned = [c for c in session if re.match(r"^[A-Za-z_]\w*=\S+$", c)]
        texts = [_as_real(c.text) if (page.name, c.line) in REAL else c.text for c in block.commands]
        outputs = _run_shell(assigned + setup + texts, cwd, env, 900)
        outputs = outputs[len(assigned) + len(setup):]
        for cmd, printed in zip(block.commands, outputs):
            missing = shows(cmd.shown, printed, block.measured)
            if missing is not None:
                problems.append(f"{rel}:{cmd.line}: `{cmd.text}` does not print {missing!r}; it printed:\n"
                                + "\n".join("    " + x for x in printed.splitlines()[:40]))
        session.extend(c.text for c in block.commands)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_the_matcher():
    printed = "job out/pp: 2 rank(s), makespan 65.920 ms\ntimes from: trace timestamps\nx\ny  z\n"
    assert shows(["job out/pp: 2 rank(s), makespan 65.920 ms", "...", "y z"], printed, False) is None
    assert shows(["job ...: 2 rank(s), makespan ... ms"], printed, False) is None
    assert shows(["times from: trace timestamps", "job out/pp: 2 rank(s), makespan 65.920 ms"], printed, False)
    assert shows(["job out/pp: 2 rank(s), makespan 99.1 ms"], printed, False)
    assert shows(["job out/pp: 3 rank(s), makespan 99.1 ms"], printed, True) is None  # numbers vary in a real run
    assert shows(["measured 47.51 ms (+0.1%)"], "measured 151.71 ms (-6.3%)", True) is None  # signs too
    assert shows(["measured 47.51 ms (+0.1%)"], "measured 151.71 ms (-6.3%)", False)
    assert shows(["simulated 16 nodes in 0.00 s"], "simulated 16 nodes in 0.23 s", False) is None
    blocks = parse_page("<!-- setup: mkdir x -->\n<!-- example: measured -->\n```\n$ ls \\\n  x\nshown\n```\n"
                        "<!-- example: skip needs a GPU -->\n```console\n$ nvidia-smi\n```\n```\nsynopsis\n```\n")
    assert [(b.setup, b.measured, b.skip, [(c.text, c.shown) for c in b.commands]) for b in blocks] == [
        (["mkdir x"], True, None, [("ls  x", ["shown"])]), ([], False, "needs a GPU", [("nvidia-smi", [])])]


def refresh_page(page: Path, work: Path, env: dict[str, str]) -> list[str]:
    """Rewrite the shown lines of ``page`` that no longer match with what their commands print now, where a
    printed line has the same shape (numbers aside); returns what changed, and the lines left unmatched. For authors whose change moved
    figures: ``python -m tests.docs.test_examples docs/guide/PAGE.md`` (then read the diff)."""
    text = page.read_text()
    lines = text.splitlines()
    shape = lambda s: re.sub(r"\d[\d,.]*", "#", _norm(s))  # noqa: E731
    changed: list[str] = []
    session: list[str] = []
    for block in parse_page(text):
        if block.skip is not None or block.lang == "python":
            continue
        assigned = [c for c in session if re.match(r"^[A-Za-z_]\w*=\S+$", c)]
        outputs = _run_shell(assigned + block.setup + [c.text for c in block.commands], work, env, 900)
        for cmd, printed in zip(block.commands, outputs[len(assigned) + len(block.setup):]):
            session.append(cmd.text)
            first = cmd.line
            while lines[first - 1].rstrip().endswith("\\"):
                first += 1
            actual, at = printed.splitlines(), 0
            for k, want in enumerate(cmd.shown):
                if _norm(want) in ("", "..."):
                    continue
                pattern = _pattern(want, block.measured)
                j = next((j for j in range(at, len(actual)) if pattern.match(_norm(actual[j]))), None)
                if j is None:
                    j = next((j for j in range(at, len(actual)) if shape(actual[j]) == shape(want)), None)
                    if j is not None:
                        changed.append(f"{page}:{first + k + 1}: {want.strip()!r} -> {actual[j].strip()!r}")
                        lines[first + k] = actual[j]
                    else:
                        changed.append(f"{page}:{first + k + 1}: {want.strip()!r} is not printed: edit it by hand")
                at = j + 1 if j is not None else at
    page.write_text("\n".join(lines) + "\n")
    return changed


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "shared").symlink_to(SHARED_DATA.parent)
        (Path(tmp) / "bin").mkdir()
        for name, line in (("etkit", f'exec {sys.executable} -m etkit "$@"'), ("python", f'exec {sys.executable} "$@"')):
            (Path(tmp) / "bin" / name).write_text(f"#!/bin/sh\n{line}\n")
            (Path(tmp) / "bin" / name).chmod(0o755)
        run_env = {**os.environ, "PATH": f"{tmp}/bin{os.pathsep}{os.environ['PATH']}", "COLUMNS": "200",
                   "PYTHONPATH": str(REPO / "src")}
        for arg in sys.argv[1:]:
            folder = Path(tmp) / f"work-{Path(arg).stem}"  # ../shared from here is the shared data
            folder.mkdir()
            print("\n".join(refresh_page(Path(arg), folder, run_env)) or f"{arg}: nothing to rewrite")
