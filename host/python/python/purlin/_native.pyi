"""Type stubs of ``purlin._native``, the native half of ``purlin`` (see ``purlin``'s docs)."""

from typing import Any, Callable, Final, Protocol, Sequence, Union

__version__: Final[str]
MAX_RANKS: Final[int]
STAGING_BUFFER_SIZE: Final[int]
PACKET_BUFFER_SIZE: Final[int]

class _Tensor(Protocol):
    """What the collectives read of a tensor (a ``torch.Tensor`` on a CUDA device)."""

    @property
    def dtype(self) -> Any: ...
    @property
    def device(self) -> Any: ...
    def data_ptr(self) -> int: ...
    def numel(self) -> int: ...
    def element_size(self) -> int: ...
    def is_contiguous(self) -> bool: ...

class _Stream(Protocol):
    @property
    def cuda_stream(self) -> int: ...

#: A ``cudaStream_t`` as an int (``torch.cuda.Stream.cuda_stream``), or a stream object.
StreamLike = Union[int, _Stream]

class ContextHandle:
    """One rank's communicator, made by ``purlin.initialize`` and released by
    ``purlin.finalize``."""

    @property
    def rank(self) -> int: ...
    @property
    def world(self) -> int: ...
    @property
    def device(self) -> int: ...
    @property
    def arch(self) -> int: ...
    @property
    def finalized(self) -> bool: ...

def create_context(
    rank: int,
    world: int,
    device: int,
    arch: int,
    stream_ptr: StreamLike,
    exchange: Callable[[bytes], Sequence[bytes]],
    *,
    kernel_timeout: float = 10.0,
) -> ContextHandle: ...
def finalize(handle: ContextHandle, stream_ptr: StreamLike) -> None: ...
def synchronize(handle: ContextHandle, stream_ptr: StreamLike) -> None: ...
def all_reduce(
    in_tensor: _Tensor,
    out_tensor: _Tensor,
    handle: ContextHandle,
    stream_ptr: StreamLike,
    reduction_mode: int = 0,
    *,
    op: int = 0,
) -> None: ...
def all_gather(
    in_tensor: _Tensor, out_tensor: _Tensor, handle: ContextHandle, stream_ptr: StreamLike
) -> None: ...
def reduce_scatter(
    in_tensor: _Tensor,
    out_tensor: _Tensor,
    handle: ContextHandle,
    stream_ptr: StreamLike,
    reduction_mode: int = 0,
    *,
    op: int = 0,
) -> None: ...
def all_to_all(
    in_tensor: _Tensor, out_tensor: _Tensor, handle: ContextHandle, stream_ptr: StreamLike
) -> None: ...
def all_gather_v(
    in_tensor: _Tensor,
    out_tensor: _Tensor,
    bytes_list: Sequence[int],
    handle: ContextHandle,
    stream_ptr: StreamLike,
) -> None: ...
def reduce_scatter_v(
    in_tensor: _Tensor,
    out_tensor: _Tensor,
    bytes_list: Sequence[int],
    handle: ContextHandle,
    stream_ptr: StreamLike,
    reduction_mode: int = 0,
    *,
    op: int = 0,
) -> None: ...
def all_to_all_v(
    in_tensor: _Tensor,
    out_tensor: _Tensor,
    splits: Sequence[int],
    handle: ContextHandle,
    stream_ptr: StreamLike,
    *,
    max_bytes: int | None = None,
) -> None: ...
def driver_present() -> bool: ...
def _rust_all_reduce_host_us(
    in_tensor: _Tensor,
    out_tensor: _Tensor,
    handle: ContextHandle,
    stream_ptr: StreamLike,
    iters: int,
) -> float: ...
def _host_workspace_addresses(
    rank: int, world: int, exchange: Callable[[bytes], Sequence[bytes]]
) -> list[int]: ...
def _unbound_handle(rank: int, world: int, device: int, arch: int = 90) -> ContextHandle: ...
