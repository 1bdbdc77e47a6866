"""PyTorch traces: collect (``collect``), read host ETs (``host``) and Kineto traces (``kineto``), link
them (``link``), and convert whole jobs to Chakra ETs (``convert``, ``job``); ``comm`` is the table of
communication ops, ``literal`` the safe parser for Python-literal strings found in traces.

PyTorch itself is imported only by ``collect``/``examples``; reading and converting traces needs no torch.
The names below are imported when first used, so that the light modules (``pairing``, to check a job's
files) come without numpy and the converter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

if TYPE_CHECKING:  # pragma: no cover
    from .job import JobReport, convert_files, convert_job, find_rank_pairs
    from .link import LinkedRank, link, link_files, write_linked_json

#: name -> module that defines it
_LAZY = {"JobReport": ".job", "convert_files": ".job", "convert_job": ".job", "find_rank_pairs": ".job",
         "LinkedRank": ".link", "link": ".link", "link_files": ".link", "write_linked_json": ".link"}

__all__ = ["JobReport", "LinkedRank", "convert_files", "convert_job", "find_rank_pairs", "link", "link_files",
           "write_linked_json"]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
