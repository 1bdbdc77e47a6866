"""A real 3-rank CPU/gloo job in which one rank is late: the planted straggler of tests/analyze/test_stragglers.py.

Run as a script (``python late_rank_job.py OUT_DIR``): it spawns :data:`WORLD` ranks (loopback ``file://``
rendezvous); every rank records :data:`STEPS` profiled steps with :func:`etkit.pytorch.collect.profile`. A step is
a small matmul then an all-reduce of its result, as data-parallel training does; rank :data:`LATE` sleeps
:data:`SLEEP_S` before its step's work, so every other rank waits for it in the all-reduce.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

WORLD = 3
LATE = 1
SLEEP_S = 0.15
STEPS = 2


def _rank(rank: int, out_dir: str, init_file: str) -> None:
    import torch
    import torch.distributed as dist

    from etkit.pytorch.collect import profile

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    w = torch.randn(64, 64)
    with profile(out_dir, rank=rank, steps=STEPS, wait=0, warmup=1) as rec:
        for _ in range(rec.total_steps):
            if rank == LATE:
                time.sleep(SLEEP_S)
            y = w @ w
            dist.all_reduce(y)
            rec.step()
    dist.barrier()
    dist.destroy_process_group()


def main(out_dir: str) -> int:
    from etkit.rankprocs import start_ranks

    with tempfile.TemporaryDirectory(prefix="etkit-test-rdzv-") as tmp:
        start_ranks(_rank, (out_dir, os.path.join(tmp, "rendezvous")), WORLD)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
