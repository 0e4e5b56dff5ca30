"""How the ranks of a torch.distributed group find each other for ``purlin.initialize``.

The native workspace set-up calls ``exchange(data) -> list[bytes]`` a few times (and once more,
as a barrier, in ``finalize``): every rank contributes bytes (its buffers' CUDA IPC handles)
and gets every rank's back in rank order.

The exchange goes through the group's key-value store (the one torch.distributed made at
``init_process_group``), not through a collective of its backend: it works the same for gloo,
nccl or any other backend, for several processes on one GPU, and a rank that never comes is a
``TimeoutError`` naming it instead of a hang. Where no store can be found it falls back to
``torch.distributed.all_gather_object``, which waits as long as the group's own timeout.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

#: The store records are prefixed with this, so an empty contribution is never an empty value.
_MARK = b"\x01"

_sequence_lock = threading.Lock()
_sequences: dict = {}


def _next_sequence(key: str) -> int:
    """How many handles this process made over the group named ``key`` before (every rank
    makes the same calls in the same order, so the number agrees across ranks)."""
    with _sequence_lock:
        n = _sequences.get(key, 0)
        _sequences[key] = n + 1
        return n


class StoreExchange:
    """An exchange over a c10d-style store (``set``, ``get``, ``wait``, ``check``,
    ``delete_key``): round ``n``'s contribution of rank ``r`` is the key ``prefix/n/r``.

    A round waits at most ``timeout`` seconds for every key; then it raises ``TimeoutError``
    naming the ranks whose key is still missing.
    """

    def __init__(self, store: Any, rank: int, world: int, prefix: str, timeout: float):
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in a group of {world}")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout}")
        self.store = store
        self.rank = rank
        self.world = world
        self.prefix = prefix
        self.timeout = float(timeout)
        self.round = 0

    def _key(self, round_: int, rank: int) -> str:
        return f"{self.prefix}/{round_}/{rank}"

    def _missing(self, keys: Sequence[str]) -> list:
        missing = []
        for rank, key in enumerate(keys):
            try:
                present = self.store.check([key])
            except Exception:
                present = False
            if not present:
                missing.append(rank)
        return missing

    def __call__(self, data: bytes) -> list:
        round_ = self.round
        self.round += 1
        keys = [self._key(round_, r) for r in range(self.world)]
        self.store.set(keys[self.rank], _MARK + bytes(data))
        started = time.monotonic()
        try:
            self.store.wait(keys, timedelta(seconds=self.timeout))
        except Exception as e:  # the store's own timeout error (DistStoreError, RuntimeError)
            missing = self._missing(keys)
            if missing:
                waited = time.monotonic() - started
                names = ", ".join(str(r) for r in missing)
                raise TimeoutError(
                    f"purlin: rank {self.rank} waited {waited:.1f} s for rank(s) {names} of "
                    f"the group (of {self.world}) to join exchange {round_} of "
                    f"{self.prefix!r}: every rank must call purlin.initialize (and "
                    f"purlin.finalize) on the group; raise the wait with "
                    f"initialize(..., timeout=seconds)"
                ) from None
            if not isinstance(e, (RuntimeError, TimeoutError)):
                raise
        parts = []
        for rank, key in enumerate(keys):
            value = self.store.get(key)
            if isinstance(value, str):
                value = value.encode("latin-1")
            value = bytes(value)
            if not value.startswith(_MARK):
                raise RuntimeError(f"purlin: rank {rank} left a malformed record under {key!r}")
            parts.append(value[len(_MARK):])
        # Every rank has written this round, so every rank has finished reading the last one:
        # this rank's key of the last round can go.
        if round_ > 0:
            try:
                self.store.delete_key(self._key(round_ - 1, self.rank))
            except Exception:
                pass
        return parts


class ObjectExchange:
    """An exchange through ``torch.distributed.all_gather_object`` (no store at hand): waits as
    long as the group's own timeout, and cannot name a missing rank."""

    def __init__(self, dist: Any, group: Any, world: int):
        self.dist = dist
        self.group = group
        self.world = world

    def __call__(self, data: bytes) -> list:
        out: list = [None] * self.world
        self.dist.all_gather_object(out, bytes(data), group=self.group)
        return [bytes(x) for x in out]


def _group_store(dist: Any, group: Any) -> Optional[Any]:
    """The key-value store of ``group`` (already prefixed for the group), else the default
    store, else ``None``. Both are private to torch.distributed, hence the care."""
    c10d = getattr(dist, "distributed_c10d", None)
    if c10d is None:
        return None
    for getter in ("_get_process_group_store", "_get_default_store"):
        fn: Optional[Callable] = getattr(c10d, getter, None)
        if fn is None:
            continue
        try:
            store = fn(group) if getter == "_get_process_group_store" else fn()
        except Exception:
            continue
        if store is not None and all(
            hasattr(store, m) for m in ("set", "get", "wait", "check")
        ):
            return store
    return None


def _group_name(dist: Any, group: Any) -> str:
    name = getattr(group, "group_name", None)
    if not name:
        try:
            ranks = dist.get_process_group_ranks(group)
            name = "ranks" + "-".join(str(r) for r in ranks)
        except Exception:
            name = "world"
    return str(name)


def exchange_for(dist: Any, group: Any, rank: int, world: int, timeout: float) -> Callable:
    """The exchange ``purlin.initialize`` hands to the native set-up for ``group``."""
    name = _group_name(dist, group)
    prefix = f"purlin/{name}/{_next_sequence(name)}"
    store = _group_store(dist, group)
    if store is None:
        return ObjectExchange(dist, group, world)
    return StoreExchange(store, rank, world, prefix, timeout)
