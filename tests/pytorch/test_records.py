"""The converter's columns (etkit.pytorch.records) and the choices it makes while filling them."""

from __future__ import annotations

import numpy as np
import pytest

from etkit.format.attrs import make_attr
from etkit.format.columnar import MISSING
from etkit.format.encode import NodeTable, encode_nodes
from etkit.format.schema import IOInfo, Node
from etkit.pytorch.records import csr_lists, int_attr_columns, io_table


def test_csr_lists_give_first_second_or_the_list() -> None:
    first = np.array([3, -1, 5, -1, 9])
    second = np.array([4, 7, -1, -1, 1])
    ptr, values = csr_lists(5, first, second, {2: [1, 2, 3], 3: []})
    rows = [values[ptr[r]:ptr[r + 1]].tolist() for r in range(5)]
    assert rows == [[3, 4], [7], [1, 2, 3], [], [9, 1]]


def _encoded(columns: list, n: int) -> list[bytes]:
    ptr = np.zeros(n + 1, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    table = NodeTable(np.arange(1, n + 1), np.full(n, 4), [], np.full(n, -1), ptr, none, ptr, none,
                      np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.uint64), attrs=columns)
    blob, offsets, lengths = encode_nodes(table)
    return [blob[o:o + k] for o, k in zip(offsets.tolist(), lengths.tolist())]


def test_an_int_attribute_equal_to_the_missing_mark_is_still_written() -> None:
    values = np.array([5, MISSING, -1, MISSING, 0])
    present = np.array([True, True, True, False, True])
    got = _encoded([*int_attr_columns("seq_id", values, present), *int_attr_columns("rf_id", values, present)], 5)
    for row, record in enumerate(got):
        node = Node(id=row + 1, type=4)
        if present[row]:
            node.attr.extend([make_attr("seq_id", int(values[row])), make_attr("rf_id", int(values[row]))])
        assert record == node.SerializeToString(), row


def test_io_table_holds_protobufs_ioinfo_messages() -> None:
    triples = [("[[1, 2, 0, 4, 4, 'cpu']]", "[[2, 2]]", "['Tensor(float)']"), ("", "", ""), ("[]", "", "['Int']"),
               ("\u00e9" * 200, "[[2, 2]]", "")]
    packed = io_table(*zip(*triples))
    for k, (values, shapes, types) in enumerate(triples):
        entry = packed.data[packed.starts[k]:packed.starts[k] + packed.sizes[k]].tobytes()
        assert entry == IOInfo(values=values, shapes=shapes, types=types).SerializeToString()
    assert io_table([], [], []).sizes.size == 0


@pytest.mark.shared_data
def test_ids_in_the_templates_or_in_columns_give_the_same_bytes(upstream, monkeypatch) -> None:
    """rf_id / seq_id are written in the ops' templates when they take few values, else from columns of
    their own: both ways give the same file, on a host trace (resnet, every op its own rf_id) and on a
    Kineto trace (hta-nccl: rf_id 0 and seq_id -1 everywhere, GPU kernels, collectives)."""
    from etkit.pytorch import convert
    from etkit.pytorch.host import load_host_trace
    from etkit.pytorch.kineto import load_kineto
    from etkit.pytorch.kineto_convert import kineto_files, link_kineto
    from etkit.pytorch.link import link

    host = link(load_host_trace(upstream / "facebookresearch-param/et_replay/tests/inputs/1.1.0-chakra.0.0.4/"
                                           "resnet_2gpu_et.json.gz"), None)
    k = kineto_files(upstream / "hta/tests/data/nccl_parser_config")[0]
    kineto = link_kineto(load_kineto(k.path, rank=k.rank))
    for linked in (host, kineto):
        files = []
        for fold in (0, 1 << 40):
            monkeypatch.setattr(convert, "_FOLDED_IDS", fold)
            files.append(convert.convert_linked_bytes(linked)[1])
        assert files[0] == files[1]
