"""Synthetic Chakra ETs: micro-benchmarks, single collectives, LLM and DLRM training jobs.

Micro-benchmarks and collectives return in-memory :class:`~etkit.model.job.Job` objects; ``llm`` and
``dlrm`` return lazy jobs (``.write(prefix)``, ``.trace(rank)``, ``.to_job()``, ``.summary()``) so that
thousands of ranks are stamped straight to ``PREFIX.<rank>.et`` plus ``PREFIX.comm_groups.json``.
:mod:`etkit.model.template` is the shared fast path for writing many ranks from one encoded template
per role. ``etkit.generate.llm`` is the function; its module's other names are reached with
``from etkit.generate.llm import ...``.
"""

from .collective import collective, parse_groups, write_collective
from .dlrm import DLRM_MODELS, DlrmJob, dlrm, write_dlrm
from .llm import MODELS, LlmJob, llm, write_llm  # noqa: I001 - llm before dlrm, which builds on it
from .micro import MICRO_CASES, micro, write_micro

__all__ = [
    "DLRM_MODELS", "DlrmJob", "LlmJob", "MICRO_CASES", "MODELS", "collective", "dlrm", "llm", "micro", "parse_groups",
    "write_collective", "write_dlrm", "write_llm", "write_micro",
]
