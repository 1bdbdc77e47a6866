"""The numpy tokenizer of IOInfo values texts (anonymize.ioinfo.canonical_tensors) against the regular expressions."""

from __future__ import annotations

import numpy as np
import pytest

from etkit.anonymize.ioinfo import _CANONICAL_TENSOR_B, IoRewriter, canonical_tensors


def sides_agree(sides: list[list[bytes]], note: object = "") -> tuple[IoRewriter, IoRewriter]:
    """Rewrite the two sides' texts one by one (``values_many``) and together (``values_sides``), assert the same
    texts come out, and return both rewriters (one by one, together) for their counters."""
    one = IoRewriter()
    expected = [one.values_many(side) for side in sides]
    vec = IoRewriter()
    packed = [(b"\x1f".join(side), np.fromiter(map(len, side), dtype=np.int64, count=len(side))) for side in sides]
    got = vec.values_sides(*packed)
    for side, (blob, starts, lengths) in zip(expected, got, strict=True):
        assert [blob[s:s + k] for s, k in zip(starts.tolist(), lengths.tolist(), strict=True)] == side, note
    return one, vec


def _expected(text: bytes) -> list[tuple[int, int, int, int, int, int]]:
    """What the regular expression splits by: each tensor's span, ids, and where its storage id ends and device starts."""
    return [(m.start(), m.end(), int(m.group(1)), int(m.group(2)), m.end(2), m.start(4))
            for m in _CANONICAL_TENSOR_B.finditer(text)]


def _located(text: bytes) -> list[tuple[int, int, int, int, int, int]] | None:
    spans = canonical_tensors(text)
    if spans is None:
        return None
    return list(zip(spans.start.tolist(), spans.end.tolist(), spans.tensor_id.tolist(), spans.storage_id.tolist(),
                    spans.storage_end.tolist(), spans.device.tolist()))


def _random_text(rng: np.random.Generator, odd: float = 0.05) -> bytes:
    """Argument lists with canonical tensors among near misses: negative numbers anywhere, other spacing, digits and
    brackets in devices and strings, escapes, adjacent tensors, empty texts; ``odd``: the share of separators
    written otherwise than ", "."""
    def number() -> str:
        return str(rng.integers(0, 10 ** int(rng.integers(1, 7))))

    def tensor() -> str:
        fields = [number() for _ in range(5)]
        if rng.random() < 0.3:
            fields[int(rng.integers(0, 5))] = "-" + fields[int(rng.integers(0, 5))]
        seps = [", " if rng.random() >= odd else rng.choice([",", ",  ", " ,"]) for _ in range(5)]
        device = rng.choice(["cpu", "cuda:0", "cuda:12", "hip", "me[7, 8, 9, 1, 2, ", "a\\'b", "", "x]y"])
        return "[" + "".join(f + s for f, s in zip(fields, seps)) + f"'{device}']"

    items = [rng.choice([tensor(), tensor(), "'str [1, 2, 3, 4, 5, ''", "3.5", "[1, 2]", "[]", "None",
                         f"[{tensor()}, {tensor()}]", tensor() + tensor(), "\"q'\"", "[12, 3, 4"])
             for _ in range(rng.integers(0, 6))]
    return ("[" + ", ".join(items) + "]").encode()


def test_the_tensors_located_are_those_the_regular_expression_splits_by() -> None:
    rng = np.random.default_rng(11)
    located = 0
    for _ in range(400):
        text = b"\x1f".join(_random_text(rng) for _ in range(int(rng.integers(1, 4))))
        got = _located(text)
        if got is not None:
            located += 1
            assert got == _expected(text), text
    assert located > 350  # the numpy path is what runs, not the fallback


@pytest.mark.parametrize("text", [
    b"[[1234567890123456789, 2, 0, 4, 4, 'cpu']]",  # an id too long for int64: the regular expression
    b"[[07, 2, 0, 4, 4, 'cpu'], [7, 2, 0, 4, 4, 'cpu']]",  # a leading zero: ids compare as text
    b"[[1, 2, 3, 4, 5, 'x[7, 8, 9, 10, 11, ']y']]",  # a second match inside the first one's device
])
def test_what_the_arrays_cannot_hold_is_declined(text: bytes) -> None:
    assert canonical_tensors(text) is None
    one, vec = IoRewriter(), IoRewriter()
    expected = one.values_many([text])
    blob, starts, lengths = vec.values_sides((text, np.array([len(text)])), (b"", np.zeros(0, dtype=np.int64)))[0]
    assert [blob[s:s + k] for s, k in zip(starts.tolist(), lengths.tolist())] == expected
    assert vec.found == one.found and vec.tensors_renumbered == one.tensors_renumbered


def test_long_numbers_between_the_ids_are_read() -> None:
    text = b"[[3, 4, -12345678901234567890123, 99999999999999999999999, 4, 'cuda:1'], 7]"
    assert _located(text) == _expected(text) and len(_expected(text)) == 1
    vec = IoRewriter()
    blob, starts, lengths = vec.values_sides((text, np.array([len(text)])), (b"", np.zeros(0, dtype=np.int64)))[0]
    assert blob == b"[[1, 1, -12345678901234567890123, 99999999999999999999999, 4, 'cuda'], None]"
    assert "cuda:1" in vec.found


def test_values_rewritten_with_numpy_as_one_by_one(monkeypatch) -> None:
    """values_sides (the numpy tokenizer and assembly where it applies) writes what values_many writes."""
    import etkit.anonymize.ioinfo as ioinfo

    assembled = []
    located = ioinfo.IoRewriter._tensors_located
    monkeypatch.setattr(ioinfo.IoRewriter, "_tensors_located",
                        lambda self, *a: assembled.append(located(self, *a)) or assembled[-1])
    rng = np.random.default_rng(3)
    for trial in range(40):
        odd = 0.0 if trial % 4 else 0.02
        sides = [[_random_text(rng, odd) for _ in range(int(rng.integers(1, 40)))] for _ in range(2)]
        one, vec = sides_agree(sides, trial)
        assert vec.tensors_renumbered == one.tensors_renumbered and vec.found == one.found, trial
    assert sum(r is not None for r in assembled) >= 25  # the numpy assembly ran (not only the fallbacks)


def test_the_device_table_is_exact() -> None:
    """Devices of up to 7 bytes are keyed by their bytes in one word, longer ones by the general table: the same."""
    from etkit.anonymize.ioinfo import _short_table
    from etkit.format.parts import span_table

    for devices in (["cpu", "cuda:0", "cuda:12", "cpu", "", "é", "abcdeé", "cuda:12"],
                    ["abcdefé", "abcdefü", "cudacuda", "cpu", "abcdefé"]):
        blob = "".join(devices).encode()
        length = np.array([len(d.encode()) for d in devices], dtype=np.int64)
        off = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64)
        index, texts = _short_table(np.frombuffer(blob, dtype=np.uint8), off, length)
        expected_index, expected_texts = span_table(blob, off, length)
        assert texts == expected_texts and index.tolist() == expected_index.tolist()
        assert [texts[i] for i in index.tolist()] == devices


def test_arguments_become_none_as_the_regular_expression_makes_them() -> None:
    """_nones (numpy where no quote is in the text) writes what the regular expression's substitution writes."""
    from etkit.anonymize.ioinfo import _OTHER_B, _nones

    rng = np.random.default_rng(8)
    alphabet = np.frombuffer(b"[](), \t\n\r\x0b\x0c\x1e\x1fab1.-\\x\xff", dtype=np.uint8)
    for trial in range(300):
        text = rng.choice(alphabet, int(rng.integers(0, 60))).tobytes()
        if trial % 10 == 0:
            text += b"'q\\'(x)' \"y\""  # quoted: the regular expression itself
        assert _nones(text) == _OTHER_B.sub(b"None", text), text
