"""Topic-aware batches for vector distillation: clusters of the teacher's vectors, one cluster per batch, the batch
source's contract (seeded per epoch, disjoint equal shards), and ``distill_vectors`` recording the setting."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyterrier_tite.training.topic_batches import cluster_groups, clustered_batches, group_keys, topic_batches


def _separated_keys(per_topic: int = 30, topics: int = 4, dim: int = 16, seed: int = 0) -> tuple[np.ndarray, list]:
    """Unit vectors around ``topics`` orthogonal directions, shuffled; returns them and each row's topic."""
    rng = np.random.default_rng(seed)
    truth = rng.permutation(np.repeat(np.arange(topics), per_topic))
    keys = np.eye(dim, dtype=np.float32)[truth] + 0.1 * rng.standard_normal((len(truth), dim)).astype(np.float32)
    return keys / np.linalg.norm(keys, axis=1, keepdims=True), truth.tolist()


def test_group_keys_average_the_groups_normalised_teacher_vectors():
    targets = torch.tensor([[3.0, 0.0], [0.0, 0.5], [-2.0, 0.0]])
    keys = group_keys([[0, 1], [2]], targets)
    np.testing.assert_allclose(keys, [[2**-0.5, 2**-0.5], [-1.0, 0.0]], atol=1e-6)
    assert keys.dtype == np.float32


def test_clusters_recover_separated_topics_and_are_seeded():
    keys, truth = _separated_keys()
    labels = cluster_groups(keys, 4, seed=1)
    pairs = {(t, int(label)) for t, label in zip(truth, labels, strict=True)}
    assert len(pairs) == 4 and len({label for _, label in pairs}) == 4  # one label per topic, four labels
    np.testing.assert_array_equal(labels, cluster_groups(keys, 4, seed=1))
    with pytest.raises(ValueError, match="cannot form 200 clusters of 120"):
        cluster_groups(keys, 200, seed=1)


def test_batches_come_from_one_cluster_each_and_keep_groups_together():
    groups = [[2 * g, 2 * g + 1] for g in range(40)]  # a document and its pseudo-query per group
    labels = [g % 3 for g in range(40)]  # clusters of 14, 13, 13 groups
    batches = list(topic_batches(groups, labels, batch_size=4, seed=7)(0, 0, 1))
    assert len(batches) == 10  # 3 + 3 + 3 from the clusters, one of the 2 + 1 + 1 groups left over
    seen = [i for batch in batches for i in batch]
    assert sorted(seen) == list(range(80))  # every group once
    for batch in batches:
        members = [batch[k] // 2 for k in range(0, len(batch), 2)]
        assert batch == [i for g in members for i in groups[g]]  # whole groups, in order
    one_cluster = [b for b in batches if len({labels[i // 2] for i in b}) == 1]
    assert len(one_cluster) == 9  # all but the batch of leftovers


def test_leftovers_form_mixed_batches_and_only_a_short_last_one_is_dropped():
    groups = [[g] for g in range(22)]
    labels = [0] * 10 + [1] * 6 + [2] * 6  # batches of 4: 2 + 1 + 1 from clusters, leftovers 2 + 2 + 2 -> 1 (+2)
    batches = list(topic_batches(groups, labels, batch_size=4, seed=0)(0, 0, 1))
    assert len(batches) == 5 and all(len(b) == 4 for b in batches)
    assert len({i for b in batches for i in b}) == 20
    mixed = [b for b in batches if len({labels[i] for i in b}) > 1]
    assert len(mixed) == 1


def test_the_order_is_a_function_of_seed_and_epoch_and_ranks_share_it_disjointly():
    groups = [[g] for g in range(64)]
    labels = [g % 4 for g in range(64)]
    source = topic_batches(groups, labels, batch_size=4, seed=3)
    assert list(source(0, 0, 1)) == list(topic_batches(groups, labels, batch_size=4, seed=3)(0, 0, 1))
    assert list(source(0, 0, 1)) != list(source(1, 0, 1))
    assert list(source(0, 0, 1)) != list(topic_batches(groups, labels, batch_size=4, seed=4)(0, 0, 1))
    ranks = [list(source(0, r, 3)) for r in range(3)]
    assert len({len(r) for r in ranks}) == 1 and len(ranks[0]) == 5  # 16 batches -> 15, five per rank
    flat = [i for r in ranks for b in r for i in b]
    assert len(flat) == len(set(flat)) == 60


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        topic_batches([[0]], [0], batch_size=0, seed=0)
    with pytest.raises(ValueError, match="2 cluster labels for 1 groups"):
        topic_batches([[0]], [0, 1], batch_size=1, seed=0)


def test_clustered_batches_put_one_topic_in_each_batch_and_report_the_sizes(capsys):
    keys, truth = _separated_keys()  # 120 texts, one group each, four topics of 30
    groups = [[i] for i in range(len(truth))]
    batches = list(clustered_batches(groups, torch.from_numpy(keys), 4, batch_size=10, seed=1, verbose=True)(0, 0, 1))
    assert len(batches) == 12 and all(len({truth[i] for i in b}) == 1 for b in batches)
    assert "120 groups in 4 clusters of 30 to 30 groups (median 30)" in capsys.readouterr().out
