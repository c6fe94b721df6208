"""The studies' offline teacher (``experiments.common.offline_teacher``): the norm-sum of a dense and a SPLADE model,
documents encoded once and cached, a cache cut short keeping its consistent prefix."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from experiments.common.fusion import normalised_sum

pytestmark = pytest.mark.usefixtures("single_thread")


# ------------------------------------------------------------------------------------------------------------ teacher
TEXTS = [
    "The Manhattan Project produced the first nuclear weapons during World War II.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "Nuclear fission releases energy by splitting heavy atomic nuclei.",
    "The French Revolution began in 1789 with the storming of the Bastille.",
]


@pytest.fixture(scope="module")
def teacher_models():
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
    from pyterrier_tite.pt.splade import Splade
    from pyterrier_tite.start_points import resolve

    return BertBiEncoder.from_pretrained(resolve("minilm"), batch_size=8), Splade.from_pretrained(resolve("splade-2l"))


def _frame() -> pd.DataFrame:
    rows = [("q1", "atomic bomb history", i) for i in range(4)]
    rows += [("q2", "how do plants make energy", i) for i in (1, 3)]
    return pd.DataFrame(
        {"qid": [r[0] for r in rows], "query": [r[1] for r in rows], "docno": [f"d{r[2]}" for r in rows],
         "text": [TEXTS[r[2]] for r in rows]}
    )  # fmt: skip


def test_teacher_components_are_the_models_own_scores(teacher_models):
    from experiments.common.offline_teacher import OfflineTeacher

    dense, splade = teacher_models
    frame = _frame()
    dense_scores, sparse_scores = OfflineTeacher(dense, splade, verbose=False).components(frame)
    expected_dense = dense.scorer()(frame).set_index(["qid", "docno"])["score"]
    expected_sparse = splade.scorer()(frame).set_index(["qid", "docno"])["score"]
    keys = list(zip(frame["qid"], frame["docno"], strict=True))
    np.testing.assert_allclose(dense_scores, expected_dense.loc[keys].to_numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sparse_scores, expected_sparse.loc[keys].to_numpy(), rtol=1e-4, atol=1e-4)


def test_teacher_is_the_normalised_sum_and_ranks_the_relevant_text_first(teacher_models):
    from experiments.common.offline_teacher import OfflineTeacher

    dense, splade = teacher_models
    frame = _frame()
    teacher = OfflineTeacher(dense, splade, verbose=False)
    scored = teacher(frame)
    dense_scores, sparse_scores = teacher.components(frame)
    expected = normalised_sum(frame.assign(score=dense_scores), frame.assign(score=sparse_scores))
    merged = scored.merge(expected, on=["qid", "docno"], suffixes=("", "_expected"))
    np.testing.assert_allclose(merged["score"], merged["score_expected"], atol=1e-12)
    best = scored.sort_values("score", ascending=False).groupby("qid").head(1).set_index("qid")["docno"]
    assert best["q1"] in ("d0", "d2") and best["q2"] == "d1"


def test_teacher_keeps_an_empty_frame_empty_and_names_a_missing_column(teacher_models):
    from experiments.common.offline_teacher import OfflineTeacher

    teacher = OfflineTeacher(*teacher_models, verbose=False)
    empty = teacher(_frame().iloc[:0])
    assert len(empty) == 0 and {"score", "rank"} <= set(empty.columns)
    with pytest.raises(Exception, match="text"):
        teacher(_frame().drop(columns=["text"]))


def test_teacher_encodes_each_document_once_and_reuses_its_cache(teacher_models, tmp_path, monkeypatch):
    from experiments.common.offline_teacher import OfflineTeacher

    dense, splade = teacher_models
    frame = _frame()
    encoded = []
    original = dense.encode

    def counting(texts, role, *args, **kwargs):
        if role == "doc":
            encoded.extend(texts)
        return original(texts, role, *args, **kwargs)

    monkeypatch.setattr(dense, "encode", counting)
    first = OfflineTeacher(dense, splade, cache_dir=str(tmp_path), verbose=False)(frame)
    assert sorted(encoded) == sorted(TEXTS)  # 6 rows, 4 distinct documents
    encoded.clear()
    second = OfflineTeacher(dense, splade, cache_dir=str(tmp_path), verbose=False)(frame)
    assert encoded == []
    pd.testing.assert_frame_equal(first, second)
    meta = tmp_path / "models.json"
    saved = json.loads(meta.read_text())
    meta.write_text(json.dumps({**saved, "dense": "another model"}))
    with pytest.raises(ValueError, match="other models"):
        OfflineTeacher(dense, splade, cache_dir=str(tmp_path), verbose=False)


@pytest.mark.parametrize("short", ["dense.npy", "sparse.npz"])
def test_teacher_cache_cut_short_by_a_killed_save_keeps_its_consistent_prefix(teacher_models, tmp_path, short):
    """A run killed between the replacements of the cache's files leaves them of different lengths; the teacher must
    neither pair a document with another's vector nor crash, but re-encode what the shorter files lack."""
    from experiments.common.offline_teacher import OfflineTeacher

    dense, splade = teacher_models
    frame = _frame()
    expected = OfflineTeacher(dense, splade, cache_dir=str(tmp_path), verbose=False)(frame)
    if short == "dense.npy":
        np.save(tmp_path / short, np.load(tmp_path / short)[:2])
    else:
        sp.save_npz(tmp_path / short, sp.load_npz(tmp_path / short).tocsr()[:2])
    with pytest.warns(UserWarning, match="keeping the first 2 documents"):
        teacher = OfflineTeacher(dense, splade, cache_dir=str(tmp_path), verbose=False)
    assert len(teacher._keys) == 2
    pd.testing.assert_frame_equal(teacher(frame), expected, check_exact=False, atol=1e-5)
    assert len(np.load(tmp_path / "keys.npy")) == np.load(tmp_path / "dense.npy").shape[0] == 4
