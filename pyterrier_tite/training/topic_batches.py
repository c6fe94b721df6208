"""Topic-aware batches for vector distillation: each batch drawn from one cluster of the teacher's vectors.

With batches of random texts the in-batch KL and the query bank's "queries rank documents" direction mostly compare
texts that any model tells apart (a physics abstract against a cooking question). A top-10 ranking depends on the
distinctions between texts the teacher finds close, so here the text groups are clustered by their teacher vectors
(spherical k-means, faiss) and every batch takes its groups from one cluster: the sampling of TAS-Balanced
(Hofstätter et al., SIGIR 2021), applied to distillation of a bi-encoder's vectors.

The batch source has the contract of :func:`~pyterrier_tite.training.vector_distillation.group_batches`: per epoch a
seeded order (a function of seed and epoch only, so a resumed run sees the same batches), flat lists of text
indices, disjoint shards per rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from pyterrier_tite.training.loop import epoch_rng


def group_keys(groups: Sequence[list[int]], targets: torch.Tensor) -> np.ndarray:
    """One float32 ``[G, D]`` key per group: the L2-normalised mean of its texts' L2-normalised teacher vectors
    (a document and its pseudo-query: their common topic)."""
    vectors = F.normalize(targets.float(), dim=-1)
    keys = torch.stack([vectors[group].mean(0) for group in groups])
    return F.normalize(keys, dim=-1).numpy().astype(np.float32)


def cluster_groups(keys: np.ndarray, clusters: int, seed: int) -> np.ndarray:
    """A cluster label per row of ``keys`` from spherical k-means with ``clusters`` centroids (seeded)."""
    import faiss

    if not 1 <= clusters <= len(keys):
        raise ValueError(f"cannot form {clusters} clusters of {len(keys)} text groups")
    kmeans = faiss.Kmeans(keys.shape[1], clusters, niter=20, seed=seed, spherical=True, verbose=False,
                          min_points_per_centroid=1, max_points_per_centroid=1 << 30)  # fmt: skip
    kmeans.train(keys)
    _, labels = kmeans.index.search(keys, 1)
    return _from_main_process(labels[:, 0])


def _from_main_process(labels: np.ndarray) -> np.ndarray:
    """Rank 0's labels on every rank of a ``torchrun`` group: k-means sums in threads, and ranks that disagreed on
    one label would cut batches of other sizes and counts, and wait for each other forever."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return labels
    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    shared = torch.from_numpy(labels.astype(np.int64)).to(device)
    dist.broadcast(shared, src=0)
    return shared.cpu().numpy()


def topic_batches(
    groups: Sequence[list[int]], labels: Sequence[int], batch_size: int, seed: int
) -> Callable[[int, int, int], Iterator[list[int]]]:
    """The Trainer's batch source: per epoch every cluster's groups shuffled and cut into batches of ``batch_size``
    groups; the groups left over (fewer than a batch per cluster) shuffled together into mixed batches; the batches
    in a shuffled order, a short last one dropped; rank ``r`` of ``world_size`` takes every ``world_size``-th batch
    (all ranks the same number)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if len(labels) != len(groups):
        raise ValueError(f"{len(labels)} cluster labels for {len(groups)} groups")
    members: dict[int, list[int]] = {}
    for group, label in enumerate(labels):
        members.setdefault(int(label), []).append(group)
    clusters = [members[label] for label in sorted(members)]

    def cut(order: list[int], into: list[list[int]]) -> list[int]:
        """Append ``order``'s full batches to ``into``; return the groups left over."""
        full = len(order) - len(order) % batch_size
        into.extend(order[start : start + batch_size] for start in range(0, full, batch_size))
        return order[full:]

    def batches(epoch: int, rank: int, world_size: int) -> Iterator[list[int]]:
        rng = epoch_rng(seed, epoch)
        chosen: list[list[int]] = []
        leftover: list[int] = []
        for cluster in clusters:
            order = list(cluster)
            rng.shuffle(order)
            leftover.extend(cut(order, chosen))
        rng.shuffle(leftover)
        cut(leftover, chosen)
        rng.shuffle(chosen)
        usable = len(chosen) - len(chosen) % world_size
        for batch in chosen[rank:usable:world_size]:
            yield [i for g in batch for i in groups[g]]

    return batches


def clustered_batches(
    groups: Sequence[list[int]], targets: torch.Tensor, clusters: int, batch_size: int, seed: int,
    verbose: bool = False,
) -> Callable[[int, int, int], Iterator[list[int]]]:
    """:func:`topic_batches` over ``clusters`` k-means clusters of the groups' teacher vectors (``targets``, one per
    text); ``verbose`` prints the cluster sizes once."""
    labels = cluster_groups(group_keys(groups, targets), clusters, seed)
    if verbose:
        sizes = np.sort(np.bincount(labels, minlength=clusters))
        print(f"topic batches: {len(groups)} groups in {clusters} clusters of {sizes[0]} to {sizes[-1]} groups "
              f"(median {sizes[len(sizes) // 2]})")  # fmt: skip
    return topic_batches(groups, labels, batch_size, seed)
