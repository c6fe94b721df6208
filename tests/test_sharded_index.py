"""``torchrun --nproc_per_node 2 -m pyterrier_tite index ...`` (gloo, CPU): each rank encodes its share of the corpus
and rank 0 writes one index equal to the single-process one (same docnos in corpus order, vectors within fp32
round-off). The corpus spans several gathers and ends in an uneven one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _tolerance import assert_float_close
from _torchrun import torchrun

TITE = "webis/tite-2-late-msmarco"
SPLADE = "naver/splade-cocondenser-ensembledistil"

WORDS = "cat mat dog park café straße quantum physics kitchen river light house tree stone music".split()
#: 21 documents: integer and string ids, unicode, an empty text; with --batch-size 1 each gather takes 16 documents
DOCS = [{"docno": i if i % 2 else f"doc-{i}", "text": " ".join(WORDS[i % 7 : i % 7 + i % 9])} for i in range(21)]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in DOCS), encoding="utf-8")
    assert any(d["text"] == "" for d in DOCS)
    return path


def test_two_ranks_write_the_single_process_flex_index(tmp_path, corpus):
    import pyterrier_dr

    import pyterrier_tite as t
    from pyterrier_tite.cli.service import build_index
    from pyterrier_tite.store.corpus import iter_corpus
    from pyterrier_tite.store.index_info import index_info

    sharded = tmp_path / "sharded"
    done = torchrun("-m", "pyterrier_tite", "index", "--model", TITE, "--dataset", str(corpus), "--index",
                    str(sharded), "--batch-size", "1", "--device", "cpu")  # fmt: skip
    assert done.stdout.count("written to") == 1  # rank 0 alone reports (and writes)
    single = tmp_path / "single"
    build_index(TITE, iter_corpus(str(corpus)), single, model=t.load(TITE, device="cpu"), batch_size=4, verbose=False)

    (docnos_a, vecs_a, meta_a), (docnos_b, vecs_b, meta_b) = (
        pyterrier_dr.FlexIndex(str(p)).payload() for p in (sharded, single)
    )
    assert list(docnos_a) == list(docnos_b) == [str(d["docno"]) for d in DOCS]
    assert meta_a == meta_b
    assert_float_close(np.array(vecs_a), np.array(vecs_b))
    assert index_info(sharded)["model"] == TITE and index_info(sharded)["documents"] == len(DOCS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "sharded", "single"]


@pytest.mark.slow
def test_two_ranks_write_the_single_process_splade_index(tmp_path, corpus):
    """SPLADE under torchrun: rank 0 feeds the gathered ``toks`` to PISA in corpus order; retrieval from the sharded
    and the single-process index gives the same run."""
    import pandas as pd

    import pyterrier_tite as t
    from pyterrier_tite.cli.service import build_index, index_retriever
    from pyterrier_tite.store.corpus import iter_corpus

    sharded, single = tmp_path / "sharded", tmp_path / "single"
    torchrun("-m", "pyterrier_tite", "index", "--model", SPLADE, "--dataset", str(corpus), "--index", str(sharded),
             "--batch-size", "1", "--device", "cpu")  # fmt: skip
    model = t.load(SPLADE, device="cpu")
    build_index(SPLADE, iter_corpus(str(corpus)), single, model=model, verbose=False)
    assert (sharded / "fwd.documents").read_text() == (single / "fwd.documents").read_text()
    topics = pd.DataFrame({"qid": ["1", "2"], "query": ["cat in the park", "café physics"]})
    runs = [index_retriever(p, k=10, model=model).transform(topics) for p in (sharded, single)]
    pd.testing.assert_frame_equal(*(r[["qid", "docno", "rank"]].reset_index(drop=True) for r in runs))
