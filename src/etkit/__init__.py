"""etkit: a toolkit for Chakra execution traces of distributed ML jobs.

Layers, each importing only those before it: ``format`` (wire format) -> ``model`` (columnar traces,
jobs) -> tools (``validate``, ``pytorch``, ``text``, ``generate``, ``analyze``, ``simulate``, ``viz``,
``replay``) -> ``cli``.

The names below are imported when first used, so that ``import etkit`` (and every ``etkit VERB --help``)
costs no numpy, protobuf or simulator import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

from .errors import EtkitError, TraceFormatError  # noqa: E402 - light: no third-party imports
from .lazy import lazy_names  # noqa: E402

if TYPE_CHECKING:  # pragma: no cover
    from .format.stream import open_trace, write_trace
    from .model import Job, ProcessGroups, Trace, load_job, load_trace
    from .pytorch.job import convert_job  # noqa: F401 (etkit.convert_job, resolved lazily by __getattr__)

#: Public names that live in heavier modules: name -> module that defines it.
_LAZY = {
    "open_trace": ".format.stream", "write_trace": ".format.stream",
    "Job": ".model", "ProcessGroups": ".model", "Trace": ".model", "load_job": ".model", "load_trace": ".model",
    "convert_job": ".pytorch.job",
}

__all__ = ["EtkitError", "Job", "ProcessGroups", "Trace", "TraceFormatError", "load_job", "load_trace",
           "open_trace", "write_trace", "__version__"]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
