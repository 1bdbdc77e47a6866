"""Replay a Chakra ET on real hardware through PyTorch and compare the replay with the trace.

``replay_job(prefix, options=ReplayOptions(mode="comm"))`` spawns one process per rank (or runs inside
torchrun), creates the trace's process groups, walks every rank's graph in dependency order issuing the
recorded collectives and point-to-point transfers and running the recorded ATen ops (or calibrated
kernels), and returns a :class:`ReplayReport`. Modules: ``plan`` (PyTorch-free planning and cross-rank
checks), ``aten`` (rebuilding recorded ops), ``pool`` (tensor reuse), ``kernels`` (calibrated stand-ins),
``comm`` (issuing communication, call log), ``engine`` (one rank's walk), ``runner`` (processes),
``report`` (text, JSON, Chrome trace).
"""

from __future__ import annotations

from .plan import Action, CommSpec, JobPlan, RankReplayPlan, plan_job
from .runner import ReplayOptions, in_torchrun, replay_job

__all__ = ["replay_job", "ReplayOptions", "in_torchrun", "plan_job", "JobPlan", "RankReplayPlan", "CommSpec", "Action"]
