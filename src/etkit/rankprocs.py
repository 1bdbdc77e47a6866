"""How etkit starts the processes of a multi-rank PyTorch job on this machine (``collect``, ``replay``).

Ranks start from a fork server that has imported PyTorch once (``forkserver``): each rank is a fork of
it, so a job of N ranks pays one ``import torch`` (about 2.5 s of CPU) instead of N, and a process that
starts several jobs pays it once. Ranks see the environment of the moment the server started (its
first job in this process); everything a rank needs goes in its arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The multiprocessing start method of rank processes.
START_METHOD = "forkserver"
#: Modules the fork server imports before it forks a rank.
PRELOAD = ("torch", "torch.distributed")


def rank_context() -> Any:
    """The multiprocessing context rank processes start in (``torch.multiprocessing``'s, so that tensors
    shared with a rank go through PyTorch's sharing strategy)."""
    import torch.multiprocessing as mp

    context = mp.get_context(START_METHOD)
    context.set_forkserver_preload(list(PRELOAD))
    return context


def start_ranks(fn: Callable[..., None], args: tuple[Any, ...], nprocs: int, *, join: bool = True) -> Any:
    """Run ``fn(rank, *args)`` in ``nprocs`` rank processes (``torch.multiprocessing.start_processes`` from
    the fork server): with ``join``, wait for all (a failed rank raises); else the context to join."""
    import torch.multiprocessing as mp

    rank_context()  # the fork server preloads torch
    return mp.start_processes(fn, args=args, nprocs=nprocs, join=join, start_method=START_METHOD)
