"""A real 4-rank CPU/gloo job that issues the collectives no example workload does, recorded with etkit.pytorch.collect.

Run as a script (``python gloo_collectives_job.py OUT_DIR``): it spawns 4 ranks (loopback ``file://``
rendezvous) and every rank records one profiled step with :func:`etkit.pytorch.collect.profile`. Each step issues,
in this order (the plan :func:`expected_calls` describes independently of any trace):

* ``barrier`` on the world group;
* ``reduce`` to rank 0, ``gather`` to rank 0 and ``scatter`` from rank 0 of a float tensor of N elements;
* a list-form ``all_gather`` (``c10d::allgather_``) of N floats;
* in the subgroups {0, 2} and {1, 3}: group rank 0 sends N floats to group rank 1, which receives them
  (global 0 -> 2 and 1 -> 3: the group ranks differ from the global ones).
"""

from __future__ import annotations

import os
import sys
import tempfile

WORLD = 4
NUMEL = 24            # floats per tensor (96 bytes)
SUBGROUPS = ([0, 2], [1, 3])
TAG = 7


def expected_calls(rank: int) -> list[dict]:
    """What one step of ``rank`` issues: (kind, bytes per the Chakra comm_size convention, group ranks, peer)."""
    size = NUMEL * 4
    world = list(range(WORLD))
    calls = [{"kind": "BARRIER", "bytes": 0, "group": world},
             {"kind": "REDUCE", "bytes": size, "group": world},
             {"kind": "GATHER", "bytes": size, "group": world},
             {"kind": "SCATTER", "bytes": size, "group": world},
             {"kind": "ALL_GATHER", "bytes": size, "group": world}]
    group = next(g for g in SUBGROUPS if rank in g)
    if group.index(rank) == 0:
        calls.append({"kind": "SEND", "bytes": size, "group": group, "src": rank, "dst": group[1], "tag": TAG})
    else:
        calls.append({"kind": "RECV", "bytes": size, "group": group, "src": group[0], "dst": rank, "tag": TAG})
    return calls


def _step(rank: int, subgroup) -> None:
    import torch
    import torch.distributed as dist

    x = torch.full((NUMEL,), float(rank + 1))
    dist.barrier()
    dist.reduce(x, dst=0)
    dist.gather(x, gather_list=[torch.empty(NUMEL) for _ in range(WORLD)] if rank == 0 else None, dst=0)
    out = torch.empty(NUMEL)
    dist.scatter(out, scatter_list=[torch.full((NUMEL,), float(r)) for r in range(WORLD)] if rank == 0 else None,
                 src=0)
    dist.all_gather([torch.empty(NUMEL) for _ in range(WORLD)], x)
    group = next(g for g in SUBGROUPS if rank in g)
    if group.index(rank) == 0:
        dist.send(x, dst=group[1], group=subgroup, tag=TAG)
    else:
        dist.recv(out, src=group[0], group=subgroup, tag=TAG)


def _rank(rank: int, out_dir: str, init_file: str) -> None:
    import torch
    import torch.distributed as dist

    from etkit.pytorch.collect import profile

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    subgroup, _ = dist.new_subgroups_by_enumeration([list(g) for g in SUBGROUPS])
    with profile(out_dir, rank=rank, steps=1, wait=0, warmup=1) as rec:
        for _ in range(rec.total_steps):
            _step(rank, subgroup)
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
