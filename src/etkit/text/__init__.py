"""ASTRA-sim 1.0 text workloads: parsing (:mod:`.parse`) and conversion to Chakra ETs (:mod:`.convert`).

>>> job = convert_text("Resnet50_DataParallel.txt", npus=4, passes=2)     # doctest: +SKIP
>>> write_text("Resnet50_DataParallel.txt", "out/resnet", npus=4)        # doctest: +SKIP
"""

from .convert import GroupLayout, convert_text, group_layout, write_text
from .parse import MODES, TextLayer, TextWorkload, TextWorkloadError, parse_text, read_text

__all__ = ["GroupLayout", "MODES", "TextLayer", "TextWorkload", "TextWorkloadError", "convert_text",
           "group_layout", "parse_text", "read_text", "write_text"]
