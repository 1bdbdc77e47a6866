"""Shared pieces of the hostile-input suite: running the CLI (in-process or as a process with resource limits),
asserting a clean error, building jobs and gzip bombs.

Every subprocess runs the same etkit tree as the test process (``PYTHONPATH``), so the suite checks the
code under test, never an installed copy.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import etkit
from etkit.cli.main import main
from etkit.format.schema import CommType, NodeType

from ..builders import coll, node, write_job
from ..conftest import PYTORCH_JOBS

#: The folder holding the ``etkit`` package under test.
ETKIT_SRC = str(Path(etkit.__file__).resolve().parents[1])
#: A real PyTorch job (2 ranks, pipeline send/recv and broadcast) used for host/Kineto cases.
PP_JOB = PYTORCH_JOBS / "pp_sendrecv_ws2"


@dataclass
class Outcome:
    rc: int
    out: str
    err: str


def cli(capsys, *argv: object) -> Outcome:  # type: ignore[no-untyped-def]
    """Run ``etkit ARGV`` in this process; a traceback would raise here and fail the test."""
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return Outcome(rc, captured.out, captured.err)


def assert_clean_error(outcome: Outcome, *names: object, rc: int = 2) -> str:
    """One line on stderr, no traceback, exit ``rc``, naming every one of ``names``; returns the line."""
    err = outcome.err.strip()
    assert outcome.rc == rc, (outcome.rc, err)
    assert "Traceback" not in outcome.err and len(err.splitlines()) == 1, err
    for name in names:
        assert str(name) in err, (name, err)
    return err


def env() -> dict[str, str]:
    """The environment of an etkit subprocess: this tree first on the path, no inherited limits."""
    out = dict(os.environ)
    out["PYTHONPATH"] = ETKIT_SRC + os.pathsep + out.get("PYTHONPATH", "")
    out.pop("ETKIT_MAX_BYTES", None)
    return out


def _limits(memory: int | None, file_size: int | None) -> Callable[[], None]:
    def apply() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if file_size is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    return apply


def run_etkit(argv: Sequence[object], *, cwd: Path, memory: int | None = None, file_size: int | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m etkit ARGV`` as a process, optionally under an address-space (``memory``) or file-size limit."""
    return subprocess.run([sys.executable, "-m", "etkit", *map(str, argv)], cwd=cwd, env=env(), text=True,
                          capture_output=True, timeout=timeout, preexec_fn=_limits(memory, file_size))


def start_etkit(argv: Sequence[object], *, cwd: Path, stderr_path: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m etkit ARGV`` in its own process group (so a Ctrl-C can reach it and its workers)."""
    err = open(stderr_path, "wb")  # noqa: SIM115 - the child holds it
    return subprocess.Popen([sys.executable, "-m", "etkit", *map(str, argv)], cwd=cwd, env=env(),
                            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)


def wait_for(condition: Callable[[], bool], timeout: float = 60.0, step: float = 0.002) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return False


def small_job(folder: Path, name: str = "job", ranks: int = 2, *, names: Sequence[str] = ("fwd", "bwd"),
              init: str | None = None) -> Path:
    """A job of ``ranks`` ranks: two compute nodes and an all-reduce each, named ``names``; with ``init``, a
    ``process_group:init`` METADATA node carrying that payload. Returns its prefix."""
    nodes = [node(1, name=names[0], duration=10, start=100), node(2, name=names[1], deps=[1], duration=20, start=110),
             coll(3, CommType.ALL_REDUCE, 4096, deps=[2], pg="0", duration=5, start=130)]
    if init is not None:
        meta = node(4, NodeType.METADATA_NODE, name="## process_group:init ##")
        meta.inputs.values = init
        nodes.append(meta)
    return write_job(folder / name, [nodes] * ranks)


def file_state(paths: Iterable[Path]) -> dict[str, tuple[bytes, int]]:
    """Content and inode of each file: what 'untouched' is compared against."""
    return {str(p): (p.read_bytes(), p.stat().st_ino) for p in paths}


def listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


# -- gzip bombs: built in time independent of their decompressed size ---------------------------------------


def gzip_repeated(head: bytes, chunk: bytes, times: int, tail: bytes = b"") -> bytes:
    """A valid gzip file of ``head + chunk * times + tail``. Deflate restarts after a full flush, so the
    compressed block of ``chunk`` is written ``times`` over; the CRC is combined, not computed over the data."""
    def deflated(data: bytes) -> bytes:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush(zlib.Z_FULL_FLUSH)

    finish = zlib.compressobj(9, zlib.DEFLATED, -15)
    end = finish.compress(tail) + finish.flush(zlib.Z_FINISH)
    crc = _crc_combine(_crc_combine(zlib.crc32(head), _crc_repeated(chunk, times), len(chunk) * times),
                       zlib.crc32(tail), len(tail))
    size = len(head) + len(chunk) * times + len(tail)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + deflated(head) + deflated(chunk) * times + end
            + struct.pack("<II", crc, size & 0xFFFFFFFF))


def _gf2_times(matrix: list[int], vector: int) -> int:
    total, i = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, row) for row in matrix]


def _crc_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A + B from the CRCs of A and B and the length of B (zlib's crc32_combine): ``crc1`` is
    carried over ``len2`` zero bytes by the operator of one zero byte squared once per bit of ``len2``."""
    operator = [0xEDB88320] + [1 << n for n in range(31)]  # one zero bit
    for _ in range(3):
        operator = _gf2_square(operator)  # one zero byte
    while len2:
        if len2 & 1:
            crc1 = _gf2_times(operator, crc1)
        len2 >>= 1
        operator = _gf2_square(operator)
    return crc1 ^ crc2


def _crc_repeated(chunk: bytes, times: int) -> int:
    result, result_len = 0, 0
    power, power_len = zlib.crc32(chunk), len(chunk)
    while times:
        if times & 1:
            result = _crc_combine(result, power, power_len) if result_len else power
            result_len += power_len
        power = _crc_combine(power, power, power_len)
        power_len *= 2
        times >>= 1
    return result


def host_json(doc: dict) -> bytes:
    return json.dumps(doc, indent=1).encode()
