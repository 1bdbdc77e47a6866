"""Tiny example training jobs that exercise every kind of communication on CPU (gloo).

Each ``_build_<workload>(rank, world)`` sets up a model for this rank and returns ``step(i)``, one
training iteration. They run inside processes that already joined the default process group (see
:func:`etkit.pytorch.collect.run_example`). Models are deliberately small: the point is the
communication pattern, recorded in seconds.

* ``ddp``: DistributedDataParallel MLP with small buckets (several all_reduces per step).
* ``tp``: sequence-parallel tensor-parallel MLP block: broadcast of the batch, all_gather and
  reduce_scatter forward and backward.
* ``pp``: pipeline, one stage per rank, 2 micro-batches: blocking recv + isend of activations and
  gradients, then a broadcast of the loss.
* ``moe``: one expert per rank: count exchange with all_to_all, dispatch and combine with uneven
  all_to_all_single, all_reduce of the gate's gradients.
* ``fsdp``: FSDP2 ``fully_shard`` MLP (all_gather, reduce_scatter).
* ``cnn``: a small CNN; with several ranks, wrapped in DDP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import OptionError, UsageError

__all__ = ["build_workload", "check_world"]

_MIN_RANKS = {"ddp": 1, "tp": 2, "pp": 2, "moe": 2, "fsdp": 1, "cnn": 1}


def check_world(workload: str, ranks: int) -> None:
    """Refuse a rank count the workload cannot run with."""
    if ranks < 1:
        raise OptionError("{ranks} must be >= 1", ranks=ranks)
    if ranks < _MIN_RANKS.get(workload, 1):
        raise UsageError(f"workload {workload!r} needs at least {_MIN_RANKS[workload]} ranks (got {ranks})")
    if ranks > 16:
        raise OptionError("{ranks}: at most 16 CPU ranks are supported by the example jobs", ranks=ranks)


def build_workload(workload: str, rank: int, world: int) -> Callable[[int], None]:
    """The ``step(i)`` function of ``workload`` for this rank."""
    builders = {"ddp": _build_ddp, "tp": _build_tp, "pp": _build_pp, "moe": _build_moe, "fsdp": _build_fsdp,
                "cnn": _build_cnn}
    return builders[workload](rank, world)


def _mlp(dims: list[int]) -> Any:
    import torch.nn as nn

    layers: list[Any] = []
    for a, b in zip(dims, dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _sgd_step(model: Any, loss_fn: Callable[[], Any], lr: float = 0.01) -> Callable[[int], None]:
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=lr)

    def step(i: int) -> None:
        opt.zero_grad()
        loss_fn().backward()
        opt.step()

    return step


def _build_ddp(rank: int, world: int) -> Callable[[int], None]:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(_mlp([32, 64, 64, 8]), bucket_cap_mb=0.01)
    x, y = torch.randn(8, 32), torch.randn(8, 8)
    return _sgd_step(model, lambda: torch.nn.functional.mse_loss(model(x), y))


def _seq_parallel_fns() -> tuple[Any, Any]:
    import torch
    import torch.distributed as dist

    class GatherSeq(torch.autograd.Function):
        """all_gather along the sequence forward, reduce_scatter of the gradient backward."""

        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            out = x.new_empty((x.shape[0] * dist.get_world_size(),) + tuple(x.shape[1:]))
            dist.all_gather_into_tensor(out, x.contiguous())
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            out = grad.new_empty((grad.shape[0] // dist.get_world_size(),) + tuple(grad.shape[1:]))
            dist.reduce_scatter_tensor(out, grad.contiguous())
            return out

    class ScatterSeq(torch.autograd.Function):
        """reduce_scatter along the sequence forward, all_gather of the gradient backward."""

        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            out = x.new_empty((x.shape[0] // dist.get_world_size(),) + tuple(x.shape[1:]))
            dist.reduce_scatter_tensor(out, x.contiguous())
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            out = grad.new_empty((grad.shape[0] * dist.get_world_size(),) + tuple(grad.shape[1:]))
            dist.all_gather_into_tensor(out, grad.contiguous())
            return out

    return GatherSeq, ScatterSeq


def _build_tp(rank: int, world: int) -> Callable[[int], None]:
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    hidden, ffn, seq = 32, 16 * world, 4 * world
    gather, scatter = _seq_parallel_fns()
    up = nn.Linear(hidden, ffn // world)     # column-parallel shard
    down = nn.Linear(ffn // world, hidden)   # row-parallel shard
    model = nn.ModuleList([up, down])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(i: int) -> None:
        tokens = torch.randn(seq, hidden) if rank == 0 else torch.empty(seq, hidden)
        dist.broadcast(tokens, src=0)
        local = tokens.chunk(world)[rank]
        opt.zero_grad()
        full = gather.apply(local)
        out = scatter.apply(down(torch.relu(up(full))))
        loss = out.pow(2).mean()
        loss.backward()
        for p in model.parameters():  # keep the replicated biases in sync
            if p.grad is not None and p is down.bias:
                dist.all_reduce(p.grad)
        opt.step()

    return step


def _build_pp(rank: int, world: int) -> Callable[[int], None]:
    import torch
    import torch.distributed as dist

    hidden, micro, mb = 32, 2, 4
    stage = _mlp([hidden, hidden, hidden])
    opt = torch.optim.SGD(stage.parameters(), lr=0.01)
    first, last = rank == 0, rank == world - 1

    def step(i: int) -> None:
        opt.zero_grad()
        inputs, outputs, losses = [], [], []
        for m in range(micro):  # forward of every micro-batch (GPipe)
            if first:
                x = torch.randn(mb, hidden)
            else:
                x = torch.empty(mb, hidden)
                dist.recv(x, src=rank - 1, tag=m)
                x.requires_grad_(True)
            y = stage(x)
            inputs.append(x)
            outputs.append(y)
            if last:
                losses.append(y.pow(2).mean())
            else:
                dist.isend(y.detach(), dst=rank + 1, tag=m).wait()  # type: ignore[union-attr]
        pending = []
        for m in reversed(range(micro)):  # backward
            if last:
                losses[m].backward()
            else:
                grad = torch.empty(mb, hidden)
                dist.recv(grad, src=rank + 1, tag=100 + m)
                outputs[m].backward(grad)
            if not first:
                pending.append(dist.isend(inputs[m].grad, dst=rank - 1, tag=100 + m))  # type: ignore[arg-type]
        for work in pending:
            work.wait()  # type: ignore[union-attr]
        opt.step()
        loss = torch.stack(losses).sum().detach() if last else torch.zeros(())
        dist.broadcast(loss, src=world - 1)

    return step


def _build_moe(rank: int, world: int) -> Callable[[int], None]:
    import torch
    import torch.distributed as dist
    import torch.distributed.nn.functional as dfn
    import torch.nn as nn

    hidden, tokens = 16, 12
    gate = nn.Linear(hidden, world)
    expert = _mlp([hidden, 32, hidden])
    opt = torch.optim.SGD(list(gate.parameters()) + list(expert.parameters()), lr=0.01)

    def step(i: int) -> None:
        opt.zero_grad()
        x = torch.randn(tokens, hidden)
        scores = gate(x).softmax(-1)
        dest = scores.argmax(-1)
        order = dest.argsort()
        send_counts = torch.bincount(dest, minlength=world)
        recv_counts = list(torch.empty(world, dtype=torch.long).chunk(world))
        dist.all_to_all(recv_counts, list(send_counts.chunk(world)))
        in_splits = send_counts.tolist()
        out_splits = [int(c) for c in torch.cat(recv_counts).tolist()]
        routed = x[order] * scores.gather(1, dest[:, None])[order]
        received = dfn.all_to_all_single(torch.empty(sum(out_splits), hidden), routed, out_splits, in_splits)
        processed = expert(received)
        back = dfn.all_to_all_single(torch.empty(tokens, hidden), processed, in_splits, out_splits)
        loss = back.pow(2).mean()
        loss.backward()
        for p in gate.parameters():  # the gate is replicated: average its gradients
            dist.all_reduce(p.grad)
        opt.step()

    return step


def _build_fsdp(rank: int, world: int) -> Callable[[int], None]:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = _mlp([16, 32, 32, 8])
    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    x, y = torch.randn(4, 16), torch.randn(4, 8)
    return _sgd_step(model, lambda: torch.nn.functional.mse_loss(model(x), y))


def _build_cnn(rank: int, world: int) -> Callable[[int], None]:
    import torch
    import torch.nn as nn

    model: Any = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                               nn.Flatten(), nn.Linear(16, 10))
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    return _sgd_step(model, lambda: nn.functional.cross_entropy(model(x), y))
