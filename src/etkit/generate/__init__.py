"""Synthetic Chakra ETs: micro-benchmarks, single collectives, LLM and DLRM training jobs.

Every generator returns an in-memory :class:`~etkit.model.job.Job` (or writes ``PREFIX.<rank>.et`` plus
``PREFIX.comm_groups.json``); :mod:`etkit.generate.writer` is the shared fast path for writing many
ranks from one encoded template per role.
"""

from .collective import collective, parse_groups, write_collective
from .micro import MICRO_CASES, micro, write_micro

__all__ = [
    "MICRO_CASES", "collective", "micro", "parse_groups", "write_collective", "write_micro",
]
from .llm import MODELS, LlmJob, llm, write_llm  # noqa: E402,F401  (LLM training steps; `llm` shadows the module name)
from .dlrm import DLRM_MODELS, DlrmJob, dlrm, write_dlrm  # noqa: E402,F401  (DLRM training steps)
