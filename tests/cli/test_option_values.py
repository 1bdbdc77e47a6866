"""Nonsense option values stop at parse time with one clear line, before any file is read or rank spawned."""

from __future__ import annotations

import argparse

import pytest

from etkit.cli.common import non_negative_float, non_negative_int, positive_float, positive_int, size_arg
from etkit.cli.main import build_parser, main

# every prefix below is missing: were the value accepted, the verb would fail later, on the file, and
# main() would return 2 instead of argparse exiting
BAD = [
    (["analyze", "nope", "--top", "-1"], "--top", "'-1' is not a whole number of at least 1"),
    (["analyze", "nope", "--top", "0"], "--top", "'0' is not a whole number of at least 1"),
    (["analyze", "nope", "--max-ranks", "two"], "--max-ranks", "'two' is not a whole number of at least 1"),
    (["analyze", "nope", "--straggler-threshold", "-2"], "--straggler-threshold", "'-2' is not a number of at least 0"),
    (["analyze", "nope", "--straggler-threshold", "nan"], "--straggler-threshold", "'nan' is not a number of at least 0"),
    (["diff", "a", "b", "--top", "-3"], "--top", "'-3' is not a whole number of at least 1"),
    (["graph", "x.et", "-o", "g.dot", "--depth", "-1"], "--depth", "'-1' is not a whole number of at least 0"),
    (["graph", "x.et", "-o", "g.dot", "--around", "-5"], "--around", "'-5' is not a whole number of at least 0"),
    (["graph", "x.et", "-o", "g.dot", "--max-nodes", "0"], "--max-nodes", "'0' is not a whole number of at least 1"),
    (["timeline", "nope", "-o", "t.json", "--max-mb", "0"], "--max-mb", "'0' is not a number above 0"),
    (["timeline", "nope", "-o", "t.json", "--max-mb", "inf"], "--max-mb", "'inf' is not a number above 0"),
    (["replay", "nope", "--threads", "0"], "--threads", "'0' is not a whole number of at least 1"),
    (["replay", "nope", "--iters", "0"], "--iters", "'0' is not a whole number of at least 1"),
    (["replay", "nope", "--warmup", "-1"], "--warmup", "'-1' is not a whole number of at least 0"),
    (["replay", "nope", "--ranks", "0"], "--ranks", "'0' is not a whole number of at least 1"),
    (["replay", "nope", "--timeout", "-1"], "--timeout", "'-1' is not a number above 0"),
    (["replay", "nope", "--max-buffer-bytes", "lots"], "--max-buffer-bytes", "size 'lots': expected a number"),
    (["demo", "--ranks", "0"], "--ranks", "'0' is not a whole number of at least 1"),
    (["demo", "--steps", "-2"], "--steps", "'-2' is not a whole number of at least 1"),
    (["validate", "nope", "--max-findings", "-1"], "--max-findings", "'-1' is not a whole number of at least 0"),
    (["generate", "micro", "--npus", "2", "-o", "m", "--comp-us", "-5"], "--comp-us",
     "'-5' is not a whole number of at least 0"),
    (["calibrate", "-o", "n.yml", "--reps", "0"], "--reps", "'0' is not a whole number of at least 1"),
    (["simulate", "nope", "--scale-compute", "-1"], "--scale-compute", "'-1' is not a number above 0"),
    (["simulate", "nope", "--samples", "-1"], "--samples", "'-1' is not a whole number of at least 0"),
    (["convert", "text", "w.txt", "-o", "t", "--npus", "0"], "--ranks/--npus", "'0' is not a whole number of at least 1"),
]


@pytest.mark.parametrize("argv, option, message", BAD, ids=[" ".join(a[:1] + a[-2:]) for a, _, _ in BAD])
def test_a_nonsense_value_is_refused_at_parse_time(argv, option, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    verb = " ".join(argv[:2]) if argv[0] in ("generate", "convert") else argv[0]
    assert error.startswith(f"etkit {verb}: error: argument {option}: {message}"), error


def test_the_edge_values_that_mean_something_are_accepted():
    parser = build_parser()
    args = parser.parse_args(["graph", "x.et", "-o", "g.dot", "--depth", "0", "--around", "0"])
    assert (args.depth, args.around) == (0, 0)  # the node alone
    args = parser.parse_args(["analyze", "p", "--straggler-threshold", "0", "--top", "1"])
    assert (args.straggler_threshold, args.top) == (0.0, 1)  # any rank above the median is a straggler
    args = parser.parse_args(["replay", "p", "--warmup", "0", "--iters", "1", "--max-buffer-bytes", "4GiB"])
    assert (args.warmup, args.iters, args.max_buffer_bytes) == (0, 1, 4 << 30)
    assert parser.parse_args(["timeline", "p", "-o", "t.json", "--max-mb", "0.5"]).max_mb == 0.5


@pytest.mark.parametrize("parse, good, bad", [
    (positive_int, {"1": 1, "12": 12, " 7 ": 7}, ["0", "-1", "1.0", "1e3", "", "x"]),
    (non_negative_int, {"0": 0, "5": 5}, ["-1", "0.5", "nan"]),
    (positive_float, {"0.001": 0.001, "3": 3.0, "1e3": 1000.0}, ["0", "-0.0", "-1", "nan", "inf", "-inf", "x"]),
    (non_negative_float, {"0": 0.0, "2.5": 2.5}, ["-0.001", "nan", "inf", ""]),
    (size_arg, {"4GiB": 4 << 30, "1KB": 1000, "512": 512}, ["-1", "1.5B", "4 parsecs"]),
])
def test_the_argparse_types(parse, good, bad):
    for text, value in good.items():
        assert parse(text) == value and type(parse(text)) is type(value)
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
