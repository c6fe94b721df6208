"""Encoding a corpus over several processes (``torchrun``) so that the index rank 0 writes is the one a single process
writes: same docnos in the same order, vectors equal up to batching round-off. The floor knows no torch: how rank 0
receives the other ranks' encodings (``torch.distributed.gather_object``) is passed in as :attr:`Shard.gather`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Shard:
    """This process's part of a sharded build: its ``rank`` of ``world_size`` processes and ``gather(encodings)``,
    which every rank calls with its encodings of a chunk and which returns, on rank 0, the list of every rank's
    encodings (rank order), elsewhere None (``torch.distributed.gather_object`` to rank 0)."""

    rank: int = 0
    world_size: int = 1
    gather: Callable[[list], list[list] | None] | None = None

    def __post_init__(self):
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not one of {self.world_size} processes")
        if self.world_size > 1 and self.gather is None:
            raise ValueError("a sharded build needs gather (how rank 0 receives the other ranks' encodings)")


#: one process encodes everything
SINGLE = Shard()


def encode_in_order(
    docs: Iterable[dict], encode: Callable[[list[dict]], Sequence], chunk_size: int = 1024, shard: Shard = SINGLE
) -> Iterator[tuple[str, object]]:
    """``(docno, encoding)`` in corpus order, where ``encode(docs)`` returns one encoding per document of a chunk (an
    array's rows or a list). Sharded (``shard.world_size > 1``), every rank must iterate the same ``docs``: rank ``r``
    encodes documents ``r, r + world_size, ...`` of each chunk of ``chunk_size * world_size`` documents, and rank 0
    gathers them and yields all of them; the other ranks yield nothing (iterate them all: each chunk is a gather)."""
    from more_itertools import chunked

    rank, world_size = shard.rank, shard.world_size
    for chunk in chunked(docs, chunk_size * world_size):
        mine = chunk[rank::world_size]
        encoded = list(encode(mine)) if mine else []
        if len(encoded) != len(mine):
            raise RuntimeError(f"the encoder returned {len(encoded)} encodings for {len(mine)} documents")
        if world_size == 1:
            yield from zip((d["docno"] for d in chunk), encoded, strict=True)
            continue
        gathered = shard.gather(encoded)
        if rank != 0:
            continue
        for position, doc in enumerate(chunk):
            yield doc["docno"], gathered[position % world_size][position // world_size]
