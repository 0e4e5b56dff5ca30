"""One rank of test_torch_cpu.py's torchrun test (CPU, gloo): the bootstrap exchange over the
real group stores of the world, a second handle, a group one rank never joins (TimeoutError
naming it), and a subgroup."""

import os

import torch.distributed as dist

from purlin import _bootstrap

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo")
ex = _bootstrap.exchange_for(dist, dist.group.WORLD, rank, world, 30)
assert isinstance(ex, _bootstrap.StoreExchange), type(ex)
assert ex(b"%d" % rank) == [b"%d" % r for r in range(world)]
assert ex(b"") == [b""] * world
# A second handle over the same group exchanges under its own keys.
ex2 = _bootstrap.exchange_for(dist, dist.group.WORLD, rank, world, 30)
assert ex2.prefix != ex.prefix
assert ex2(b"b%d" % rank) == [b"b%d" % r for r in range(world)]
assert ex(b"c") == [b"c"] * world

late = world - 1
group = dist.new_group(list(range(world)))
if rank != late:
    try:
        _bootstrap.exchange_for(dist, group, rank, world, 2.0)(b"x")
    except TimeoutError as e:
        assert f"rank(s) {late} " in str(e), str(e)
    else:
        raise SystemExit(f"rank {rank}: no TimeoutError for the missing rank {late}")
dist.barrier()

sub = dist.new_group([0, 1])
if rank in (0, 1):
    r = dist.get_rank(sub)
    assert _bootstrap.exchange_for(dist, sub, r, 2, 30)(b"s%d" % r) == [b"s0", b"s1"]
dist.barrier()
print("store worker ok", rank, flush=True)
dist.destroy_process_group()
