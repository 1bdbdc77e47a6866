"""``etkit.feeder.Feeder``: the dependency-resolving node iterator (defined in :mod:`etkit.model.feeder`)."""

from .model.feeder import Feeder

__all__ = ["Feeder"]
