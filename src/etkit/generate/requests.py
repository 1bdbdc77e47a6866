"""Requests of a serving run: read from a file or drawn as a seeded synthetic load.

A request arrives at ``arrival_us`` (integer microseconds from the start of the run, the resolution of
Chakra's ``duration_micros``) with ``prompt`` tokens and asks for ``output`` tokens.

Files (CSV with a header row, or JSON Lines): one request per row/line with an arrival time in one of
the columns ``arrival_us``, ``arrival_ms``, ``arrival_s`` (also ``arrival``/``timestamp``, in seconds),
the prompt length in ``prompt_tokens`` (or ``input_tokens``, ``prompt_len``, ``input_len``) and the
output length in ``output_tokens`` (or ``output_len``, ``max_tokens``). Requests are ordered by
arrival (stable), and numbered in that order from 0.

Synthetic load: Poisson arrivals at ``rate`` requests per second for ``duration_s`` seconds (or
``count`` requests), lengths drawn from a :class:`LengthDist` (``"512"``, ``"uniform:128:2048"``,
``"normal:512:128"``, ``"lognormal:512:0.8"`` = median and sigma, ``"exp:256"`` = mean), each at least
one token; the same seed gives the same requests.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from pathlib import Path

import numpy as np
import orjson

from ..errors import EtkitError, UsageError
from ..records import record

__all__ = ["Request", "RequestSource", "LengthDist", "parse_length", "synthetic_requests", "load_requests",
           "MAX_TOKENS"]

#: Longest prompt or output a request may ask for (a bound on what a hostile file can make us allocate).
MAX_TOKENS = 1 << 24

_ARRIVAL_COLUMNS = (("arrival_us", 1.0), ("arrival_ms", 1e3), ("arrival_s", 1e6), ("arrival", 1e6),
                    ("timestamp", 1e6))
_PROMPT_COLUMNS = ("prompt_tokens", "input_tokens", "prompt_len", "input_len")
_OUTPUT_COLUMNS = ("output_tokens", "output_len", "max_tokens")


@record(frozen=True)
class Request:
    """One request: its number, arrival (µs from the start), prompt and output lengths (tokens)."""

    id: int
    arrival_us: int
    prompt: int
    output: int


@record(frozen=True)
class LengthDist:
    """A distribution of token counts: ``kind`` fixed, uniform, normal, lognormal or exp, with ``a``, ``b``."""

    kind: str
    a: float
    b: float = 0.0

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            values = np.full(n, self.a)
        elif self.kind == "uniform":
            values = rng.integers(int(self.a), int(self.b) + 1, size=n)
        elif self.kind == "normal":
            values = rng.normal(self.a, self.b, size=n)
        elif self.kind == "lognormal":
            values = rng.lognormal(math.log(self.a), self.b, size=n)
        else:  # exp
            values = rng.exponential(self.a, size=n)
        return np.clip(np.rint(values), 1, MAX_TOKENS).astype(np.int64)

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"{self.a:g}"
        return f"{self.kind}:{self.a:g}" + (f":{self.b:g}" if self.kind != "exp" else "")


@record(frozen=True)
class RequestSource:
    """Where a serving run's requests come from: a ``file``, or a synthetic load (``rate`` requests/s for
    ``duration_s`` seconds or ``count`` requests, lengths ``prompt_len``/``output_len``, ``seed``).

    ``rate_scale`` compresses a file's arrival times (2 = twice the rate); for a synthetic load, a new
    rate is a new ``rate``. Kept in the ETs (as JSON) so that a sweep can regenerate the run at other rates.
    """

    file: str | None = None
    rate: float | None = None
    duration_s: float | None = None
    count: int | None = None
    prompt_len: str = "512"
    output_len: str = "128"
    seed: int = 0
    rate_scale: float = 1.0

    def requests(self) -> list[Request]:
        if self.file is not None:
            loaded = load_requests(self.file)
            if self.rate_scale == 1.0:
                return loaded
            if not (math.isfinite(self.rate_scale) and self.rate_scale > 0):
                raise UsageError(f"request rate scale must be positive, got {self.rate_scale}")
            return [Request(r.id, int(round(r.arrival_us / self.rate_scale)), r.prompt, r.output) for r in loaded]
        if self.rate is None:
            raise UsageError("give a request file or a request rate")
        return synthetic_requests(self.rate, duration_s=self.duration_s, count=self.count,
                                  prompt_len=self.prompt_len, output_len=self.output_len, seed=self.seed)

    def at_rate(self, rate: float) -> RequestSource:
        """The same load at ``rate`` requests/s (a file's arrivals compressed to that mean rate)."""
        if self.file is None:
            return dataclasses.replace(self, rate=rate)
        loaded = load_requests(self.file)
        span_s = (loaded[-1].arrival_us - loaded[0].arrival_us) / 1e6
        base = (len(loaded) - 1) / span_s if span_s > 0 else rate
        return dataclasses.replace(self, rate_scale=rate / base)

    def to_dict(self) -> dict[str, object]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> RequestSource:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})  # type: ignore[arg-type]


def parse_length(text: str) -> LengthDist:
    """``"512"``, ``"uniform:LO:HI"``, ``"normal:MEAN:STD"``, ``"lognormal:MEDIAN:SIGMA"`` or ``"exp:MEAN"``."""
    parts = str(text).strip().split(":")
    try:
        numbers = [float(p) for p in parts[1:]] if len(parts) > 1 else [float(parts[0])]
    except ValueError:
        numbers = []
    kind = "fixed" if len(parts) == 1 else parts[0].lower()
    wanted = {"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2, "exp": 1}
    ok = kind in wanted and len(numbers) == wanted[kind] and all(math.isfinite(x) for x in numbers)
    if ok:
        a, b = numbers[0], (numbers[1] if len(numbers) > 1 else 0.0)
        ok = 1 <= a <= MAX_TOKENS and (kind not in ("uniform",) or a <= b <= MAX_TOKENS) and b >= 0
    if not ok:
        raise UsageError(f"length {text!r}: give N, uniform:LO:HI, normal:MEAN:STD, lognormal:MEDIAN:SIGMA "
                         f"or exp:MEAN (tokens, 1..{MAX_TOKENS})")
    return LengthDist(kind, a, b)


def synthetic_requests(rate: float, *, duration_s: float | None = None, count: int | None = None,
                       prompt_len: str | LengthDist = "512", output_len: str | LengthDist = "128",
                       seed: int = 0) -> list[Request]:
    """Poisson arrivals at ``rate`` requests/s for ``duration_s`` seconds, or exactly ``count`` requests."""
    if not (math.isfinite(rate) and rate > 0):
        raise UsageError(f"request rate must be a positive number of requests per second, got {rate}")
    if (duration_s is None) == (count is None):
        raise UsageError("give the length of the synthetic load as a duration or as a request count (one of them)")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise UsageError(f"duration must be a positive number of seconds, got {duration_s}")
    prompt = prompt_len if isinstance(prompt_len, LengthDist) else parse_length(prompt_len)
    output = output_len if isinstance(output_len, LengthDist) else parse_length(output_len)
    rng = np.random.default_rng(seed)
    if count is None:
        assert duration_s is not None
        expected = rate * duration_s
        draws = int(expected + 10 * math.sqrt(expected) + 10)
        if draws > 10_000_000:
            raise UsageError(f"{rate} requests/s for {duration_s} s is more than 10,000,000 requests")
        arrivals = np.cumsum(rng.exponential(1e6 / rate, size=draws))
        arrivals = arrivals[arrivals < duration_s * 1e6]
    else:
        if not 1 <= count <= 10_000_000:
            raise UsageError(f"request count must be 1..10,000,000, got {count}")
        arrivals = np.cumsum(rng.exponential(1e6 / rate, size=count))
    n = len(arrivals)
    prompts, outputs = prompt.sample(rng, n), output.sample(rng, n)
    micros = np.rint(arrivals).astype(np.int64)
    return [Request(i, int(t), int(p), int(o)) for i, (t, p, o) in enumerate(zip(micros, prompts, outputs))]


def load_requests(path: str | os.PathLike[str]) -> list[Request]:
    """Requests from a CSV (header row) or JSON Lines file (see the module docstring for the columns)."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EtkitError(f"{source}: cannot read requests: {getattr(exc, 'strerror', None) or exc}") from None
    stripped = text.lstrip()
    if stripped.startswith("{"):
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise EtkitError(f"{source}:{number}: not a JSON object: {exc}") from None
            if not isinstance(row, dict):
                raise EtkitError(f"{source}:{number}: each line must be a JSON object")
            rows.append((number, row))
    else:
        reader = csv.DictReader(text.splitlines())
        rows = [(number, row) for number, row in enumerate(reader, 2)]
    if not rows:
        raise EtkitError(f"{source}: no requests")
    parsed = [_request_row(source, number, row) for number, row in rows]
    parsed.sort(key=lambda r: r[0])
    return [Request(i, t, p, o) for i, (t, p, o) in enumerate(parsed)]


def _request_row(source: Path, number: int, row: dict) -> tuple[int, int, int]:
    def column(names: tuple[str, ...]) -> tuple[str, object] | None:
        return next(((name, row[name]) for name in names if row.get(name) not in (None, "")), None)

    arrival = next(((name, row[name], scale) for name, scale in _ARRIVAL_COLUMNS if row.get(name) not in (None, "")),
                   None)
    prompt, output = column(_PROMPT_COLUMNS), column(_OUTPUT_COLUMNS)
    if arrival is None or prompt is None or output is None:
        missing = [what for what, got in (("arrival time (arrival_s/arrival_ms/arrival_us)", arrival),
                                          ("prompt_tokens", prompt), ("output_tokens", output)) if got is None]
        raise EtkitError(f"{source}:{number}: missing {', '.join(missing)}")
    name, value, scale = arrival
    micros = _number(source, number, name, value) * scale
    if not 0 <= micros < 2 ** 62:
        raise EtkitError(f"{source}:{number}: {name} {value!r} is not a time from 0 on")
    counts = []
    for col, val in (prompt, output):
        tokens = _number(source, number, col, val)
        if tokens != int(tokens) or not 1 <= tokens <= MAX_TOKENS:
            raise EtkitError(f"{source}:{number}: {col} {val!r} is not a whole number of tokens in 1..{MAX_TOKENS}")
        counts.append(int(tokens))
    return int(round(micros)), counts[0], counts[1]


def _number(source: Path, number: int, name: str, value: object) -> float:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        out = math.nan
    if isinstance(value, bool) or not math.isfinite(out):
        raise EtkitError(f"{source}:{number}: {name} {value!r} is not a number")
    return out
