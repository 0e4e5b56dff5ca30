"""Purlin: single-kernel GPU collectives for torch, on Purlin's Rust core.

The original library's Python API::

    import torch, torch.distributed as dist, purlin
    stream = torch.cuda.current_stream(device)
    major, minor = torch.cuda.get_device_capability(device)
    handle = purlin.initialize(dist.group.WORLD, device, major * 10 + minor, stream.cuda_stream)
    out = torch.empty_like(x)
    purlin.all_reduce(x, out, handle, stream.cuda_stream)
    purlin.all_reduce(x, out, handle, stream.cuda_stream,
                      reduction_mode=purlin.ReductionMode.DETERMINISTIC)
    purlin.finalize(handle, stream.cuda_stream)

plus ``all_gather``, ``reduce_scatter``, ``all_to_all`` and the V forms ``all_gather_v``,
``reduce_scatter_v`` and ``all_to_all_v`` (sizes in bytes, as Python lists). Every call checks
its arguments and raises ``ValueError`` / ``TypeError`` before anything is queued, then queues
one kernel on the stream it is given, with no host synchronisation: calls can be captured in
``torch.cuda.graph``. A rank that never comes is a ``TimeoutError`` naming it.

Where this package differs from the original is listed in ``DIFFERENCES`` (and the README).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Optional, Union

from . import _bootstrap
from ._native import (
    MAX_RANKS,
    PACKET_BUFFER_SIZE,
    STAGING_BUFFER_SIZE,
    ContextHandle,
    __version__,
    all_gather,
    all_gather_v,
    all_reduce,
    all_to_all,
    all_to_all_v,
    finalize,
    reduce_scatter,
    reduce_scatter_v,
    synchronize,
)
from . import _native

__all__ = [
    "ContextHandle",
    "DataType",
    "DEFAULT_TIMEOUT",
    "DEFAULT_KERNEL_TIMEOUT",
    "MAX_RANKS",
    "PACKET_BUFFER_SIZE",
    "ReduceOp",
    "ReductionMode",
    "STAGING_BUFFER_SIZE",
    "__version__",
    "all_gather",
    "all_gather_v",
    "all_reduce",
    "all_to_all",
    "all_to_all_v",
    "finalize",
    "initialize",
    "reduce_scatter",
    "reduce_scatter_v",
    "synchronize",
]

#: Seconds ``initialize`` and ``finalize`` wait for the slowest rank before a ``TimeoutError``.
DEFAULT_TIMEOUT = 120.0
#: Seconds a collective's kernel waits for a peer before it gives up (see ``synchronize``).
DEFAULT_KERNEL_TIMEOUT = 10.0


class ReductionMode(IntEnum):
    """How reductions combine values. ``DETERMINISTIC`` gives bitwise repeatable results: every
    element is accumulated in f32 over ranks 0..world-1 in order and rounded once.
    ``NON_DETERMINISTIC`` (the default) lets Purlin pick the fastest datapath; today that is the
    deterministic one (Purlin has no multimem datapath enabled)."""

    NON_DETERMINISTIC = 0
    DETERMINISTIC = 1


class DataType(IntEnum):
    """The element types reductions run in (the original's enum; dtypes are read from the
    tensors, so calls never take it)."""

    BF16 = 0
    FP16 = 1
    FP8_E4M3 = 2
    FP8_E5M2 = 3
    FP32 = 4


class ReduceOp(IntEnum):
    """The reduction operator, keyword ``op=`` of the reductions (an extension: the original
    only sums)."""

    SUM = 0
    MAX = 1
    MIN = 2
    PROD = 3


#: Where this package's API differs from the original's (also in the README).
DIFFERENCES = (
    "Argument checks raise ValueError/TypeError with a message (the original asserts), and "
    "all_gather, reduce_scatter and all_to_all check out_tensor's size too.",
    "initialize exchanges CUDA IPC handles through the group's store (any backend, several "
    "processes per GPU) instead of torch symmetric memory, and takes keyword-only timeout= "
    "and kernel_timeout=; a missing rank is a TimeoutError naming it.",
    "arch is major*10+minor (90) or the ARCH codes 700/800/900/1000; it picks the newest of "
    "Purlin's sm_70/80/90/100 kernels at or below it (the original JIT-compiles for it).",
    "stream_ptr may also be a torch.cuda.Stream (anything with .cuda_stream).",
    "Reductions take keyword-only op=ReduceOp.SUM|MAX|MIN|PROD; the original only sums.",
    "Added: synchronize(handle, stream_ptr), which reports a kernel that timed out waiting "
    "for a peer as a TimeoutError; finalize reports it too.",
    "V sizes may be any whole number of elements (the original needs multiples of 16 bytes).",
    "all_to_all_v takes keyword-only max_bytes= (a bound on every split, the same on every "
    "rank) to pick the tuning band; without it the largest band is used.",
)


def _torch_distributed() -> Any:
    try:
        import torch.distributed as dist
    except ImportError as e:
        raise RuntimeError(
            "purlin.initialize needs torch (torch.distributed): pip install torch"
        ) from e
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "purlin.initialize needs an initialized torch.distributed: call "
            "torch.distributed.init_process_group first (run under torchrun)"
        )
    return dist


def _ordinal(device: Union[int, str, Any]) -> int:
    """The CUDA ordinal ``device`` names: an int, ``"cuda:N"``, or a ``torch.device``."""
    if isinstance(device, bool):
        raise TypeError("device must be a torch.device, 'cuda:N' or an int, not a bool")
    if isinstance(device, int):
        index: Optional[int] = device
        kind = "cuda"
    elif isinstance(device, str):
        kind, _, rest = device.partition(":")
        index = int(rest) if rest else None
    else:
        kind = getattr(device, "type", None)
        index = getattr(device, "index", None)
        if kind is None:
            raise TypeError(
                f"device must be a torch.device, 'cuda:N' or an int, not {type(device).__name__}"
            )
    if kind != "cuda":
        raise ValueError(f"device must be a CUDA device, not {device!r}")
    if index is None:
        import torch

        index = torch.cuda.current_device()
    if index < 0:
        raise ValueError(f"device index must be non-negative, not {index}")
    return index


def initialize(
    group: Any,
    device: Union[int, str, Any],
    arch: int,
    stream_ptr: Union[int, Any],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    kernel_timeout: float = DEFAULT_KERNEL_TIMEOUT,
) -> ContextHandle:
    """Makes this rank's handle for the ranks of ``group`` (``dist.group.WORLD``, a group of
    ``dist.new_group``, or ``None`` for the world). Collective: every rank of the group calls
    it, with its own device.

    ``device``: the rank's CUDA device (``torch.device``, ``"cuda:N"`` or ``N``); several ranks
    may share one GPU. ``arch``: ``major * 10 + minor`` of the device's compute capability (or
    the original's 700/800/900/1000): the newest Purlin kernels at or below it are loaded.
    ``stream_ptr``: a ``cudaStream_t`` of the device (``torch.cuda.current_stream().cuda_stream``).

    ``timeout`` (seconds) bounds every wait for the other ranks here and in ``finalize``; a rank
    that never comes raises ``TimeoutError`` naming it. ``kernel_timeout`` (seconds) bounds how
    long a collective's kernel waits for a peer (see ``synchronize``).

    Each handle allocates about ``2 * (STAGING_BUFFER_SIZE + world * PACKET_BUFFER_SIZE)`` bytes
    of device memory (the original's sizes) and maps every peer's with CUDA IPC.
    """
    dist = _torch_distributed()
    if group is None:
        group = dist.group.WORLD
    rank = dist.get_rank(group)
    world = dist.get_world_size(group)
    if rank < 0:
        raise ValueError("this process is not a member of the group")
    if world > MAX_RANKS:
        raise ValueError(f"the group has {world} ranks; Purlin supports at most {MAX_RANKS}")
    if isinstance(arch, bool) or not isinstance(arch, int):
        raise TypeError(f"arch must be an int (major * 10 + minor), not {type(arch).__name__}")
    ordinal = _ordinal(device)
    exchange = _bootstrap.exchange_for(dist, group, rank, world, timeout)
    return _native.create_context(
        rank, world, ordinal, arch, stream_ptr, exchange, kernel_timeout=kernel_timeout
    )
