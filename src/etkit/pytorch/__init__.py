"""PyTorch traces: collect (``collect``), read host ETs (``host``) and Kineto traces (``kineto``), link
them (``link``), and convert whole jobs to Chakra ETs (``convert``, ``job``); ``comm`` is the table of
communication ops, ``literal`` the safe parser for Python-literal strings found in traces.

PyTorch itself is imported only by ``collect``/``examples``; reading and converting traces needs no torch.
"""

from .job import JobReport, convert_files, convert_job, find_rank_pairs
from .link import LinkedRank, link, link_files, write_linked_json

__all__ = ["JobReport", "LinkedRank", "convert_files", "convert_job", "find_rank_pairs", "link", "link_files",
           "write_linked_json"]
