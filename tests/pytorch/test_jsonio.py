"""Chunked reading of big JSON arrays gives exactly what a whole-document parse gives, in every layout."""

from __future__ import annotations

import json

import pytest

from etkit.errors import EtkitError
from etkit.pytorch.jsonio import read_array_document

DOC = {"schema": "1.1.1-chakra.0.0.4", "pid": 7,
       "nodes": [{"id": i, "name": f"op{i}", "attrs": [{"name": "rf_id", "value": i}, {"name": "tid", "value": 1}],
                  "inputs": {"values": [[i, i, 0, 4, 4, "cpu"], "},\n{"]}} for i in range(50)],
       "finish_ts": 9}


@pytest.mark.parametrize("dump", [
    lambda d: json.dumps(d),                     # one line: no boundary at all
    lambda d: json.dumps(d, indent=2),           # nested objects on their own lines: boundaries inside nodes
    lambda d: json.dumps(d, indent=None, separators=(",", ":")).replace('},{"id"', '},\n    {"id"'),
])
@pytest.mark.parametrize("size", [1, 7, 2048])
def test_chunks_equal_the_array(tmp_path, dump, size):
    path = tmp_path / "doc.json"
    path.write_text(dump(DOC))
    doc = read_array_document(path, "nodes")
    assert doc.header == {k: v for k, v in DOC.items() if k != "nodes"}
    chunks = list(doc.chunks(size))
    assert [n for c in chunks for n in c] == DOC["nodes"]
    assert all(len(c) <= size for c in chunks)


def test_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"nodes": [ {"id": 1}, ')
    with pytest.raises(EtkitError, match="bad.json"):
        list(read_array_document(path, "nodes").chunks())
    with pytest.raises(EtkitError, match="missing.json"):
        read_array_document(tmp_path / "missing.json", "nodes")


@pytest.mark.parametrize("tail", ['"INFO": ["a ] b", ["c"]], "n": 1', '"INFO": [{"x": [1]}]'])
def test_an_array_followed_by_another_is_read_without_parsing_the_whole_document(tmp_path, monkeypatch, tail):
    # (Kineto writes its "INFO" logs after traceEvents: the document's last "]" is not the array's)
    from etkit.pytorch import jsonio

    text = json.dumps(DOC, indent=2)[:-2] + ",\n  " + tail + "\n}"
    path = tmp_path / "doc.json"
    path.write_text(text)
    monkeypatch.setattr(jsonio, "_loads", lambda data, path: pytest.fail("the whole document was parsed"))
    assert [n for c in read_array_document(path, "nodes").chunks(7) for n in c] == DOC["nodes"]


def test_an_array_followed_by_malformed_json_is_still_an_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(DOC, indent=2)[:-2] + ',\n  "INFO": ["a"], "x": [1,]\n}')
    with pytest.raises(EtkitError, match="bad.json: not valid JSON"):
        list(read_array_document(path, "nodes").chunks())


@pytest.mark.parametrize("text", [
    json.dumps(DOC),
    json.dumps(DOC, indent=2),
    json.dumps(DOC, indent=None, separators=(",", ":")).replace('},{"id"', '},\n    {"id"'),
    json.dumps(DOC, indent=2)[:-2] + ',\n  "INFO": ["a ] b", ["c"]], "n": 1\n}',
])
def test_a_mapped_file_reads_as_the_same_bytes_read_whole(tmp_path, monkeypatch, text):
    # a large plain file is mapped, not read (jsonio.MAP_BYTES): every path (chunks, the array ending
    # before the document's last "]", a boundary inside an element) gives what the read bytes give
    from etkit.pytorch import jsonio

    path = tmp_path / "doc.json"
    path.write_text(text)
    read = read_array_document(path, "nodes", data=path.read_bytes())
    expected = (read.header, [n for c in read.chunks(7) for n in c])
    monkeypatch.setattr(jsonio, "MAP_BYTES", 1)
    doc = read_array_document(path, "nodes")
    assert type(doc._data).__name__ == "mmap"
    assert (doc.header, [n for c in doc.chunks(7) for n in c]) == expected


def test_a_mapped_file_that_is_no_array_document_is_parsed_whole_or_refused(tmp_path, monkeypatch):
    from etkit.pytorch import jsonio

    monkeypatch.setattr(jsonio, "MAP_BYTES", 1)
    path = tmp_path / "plain.json"
    path.write_text('{"pid": 1, "nodes": "none"}')  # no array: the whole document, as from the read bytes
    with pytest.raises(EtkitError, match="plain.json: 'nodes' is not a JSON array"):
        read_array_document(path, "nodes")
    path.write_text('{"nodes": [ {"id": 1}, ')
    with pytest.raises(EtkitError, match="plain.json: not valid JSON"):
        list(read_array_document(path, "nodes").chunks())


def test_the_mapping_check_does_not_open_a_fifo(tmp_path):
    """Opening a FIFO to see whether it can be mapped would take its writer's bytes (or wait for a writer
    forever): the check must decide from the path alone, and the document is then read from the FIFO once."""
    import os
    import threading

    from etkit.pytorch import jsonio

    fifo = tmp_path / "host.json"
    os.mkfifo(fifo)
    verdict: list[object] = []
    probe = threading.Thread(target=lambda: verdict.append(jsonio._mapped(fifo)), daemon=True)
    probe.start()
    probe.join(5.0)
    if probe.is_alive():  # it opened the FIFO and waits for a writer: give it one, then fail
        with open(fifo, "wb"):
            pass
        probe.join(5.0)
        pytest.fail("jsonio._mapped opened a FIFO")
    assert verdict == [None]
