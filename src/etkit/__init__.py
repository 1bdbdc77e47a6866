"""etkit: a toolkit for Chakra execution traces of distributed ML jobs.

Layers, each importing only those before it: ``format`` (wire format) -> ``model`` (columnar traces,
jobs) -> tools (``validate``, ``pytorch``, ``text``, ``generate``, ``analyze``, ``simulate``, ``viz``,
``replay``) -> ``cli``.
"""

__version__ = "0.1.0"

from .errors import EtkitError, TraceFormatError  # noqa: E402
from .format.stream import open_trace, write_trace  # noqa: E402
from .model import Job, ProcessGroups, Trace, load_job, load_trace  # noqa: E402

__all__ = ["EtkitError", "Job", "ProcessGroups", "Trace", "TraceFormatError", "load_job", "load_trace",
           "open_trace", "write_trace", "__version__"]


def __getattr__(name: str):  # noqa: ANN202 - lazy entry points that pull in heavier tool packages
    if name == "convert_job":
        from .pytorch.job import convert_job

        return convert_job
    raise AttributeError(f"module 'etkit' has no attribute {name!r}")
