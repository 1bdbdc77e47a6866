"""The safe literal parser, re-exported from :mod:`etkit.literal` where it now lives (the model layer
reads ``process_group:init`` payloads with it too, and must not import a producer)."""

from __future__ import annotations

from ..literal import MAX_DEPTH, MAX_LENGTH, LiteralError, parse_literal

__all__ = ["LiteralError", "parse_literal", "MAX_DEPTH", "MAX_LENGTH"]
