"""The in-memory model every tool shares: columnar :class:`Trace` per rank, :class:`Job`, process groups."""

from .groups import ProcessGroups
from .job import Job, discover, load_job
from .trace import MISSING, Trace, load_trace

__all__ = ["Job", "MISSING", "ProcessGroups", "Trace", "discover", "load_job", "load_trace"]
