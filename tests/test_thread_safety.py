"""One transformer called from several threads at once (a search service, a thread pool) returns exactly what
sequential calls return: no transformer patches a shared module, keeps per-call state on ``self`` or lets one call's
tokenizer settings (a query's length, a document's) leak into another's. Each family is called from 4 threads on 4
frames that differ in kind (queries, documents, result frames) and in text length, so the tokenizer truncates to a
different length in each, several rounds, and every answer must equal the sequential one bit for bit (CPU)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest
from _input_matrix import build_dense, build_splade, load_models

pytestmark = pytest.mark.usefixtures("single_thread")

ROUNDS = 6
WORDS = "the cat sat on a mat by river bank where fish swim under old stone bridge in cold morning light".split()


def _text(words: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice(WORDS, size=words))


def _queries(words: int, seed: int, n: int = 3) -> pd.DataFrame:
    return pd.DataFrame({"qid": [f"q{i}" for i in range(n)], "query": [_text(words + i, seed + i) for i in range(n)]})


def _docs(words: int, seed: int, n: int = 4) -> pd.DataFrame:
    texts = [_text(words + 7 * i, seed + i) for i in range(n)]
    return pd.DataFrame({"docno": [f"d{i}" for i in range(n)], "text": texts})


def _results(query_words: int, doc_words: int, seed: int) -> pd.DataFrame:
    """Two queries with three documents each (the documents of different lengths)."""
    queries, docs = _queries(query_words, seed, 2), _docs(doc_words, seed + 50, 3)
    return queries.merge(docs, how="cross")


# query texts of about 4 and 40+ tokens per word-piece tokenizer (the fixtures' vocabularies split most words into
# letters): below and above every query length; documents above every document length
ENCODER_FRAMES = [_queries(1, 1), _queries(30, 2), _docs(200, 3), _results(20, 120, 4)]
RERANK_FRAMES = [_results(1, 5, 5), _results(30, 200, 6), _results(8, 40, 7), _results(15, 400, 8)]
QUERY_FRAMES = [_queries(1, 9), _queries(30, 10), _queries(5, 11), _queries(12, 12)]


@pytest.fixture(scope="module")
def models() -> dict:
    return load_models()


def _assert_same_answers(transformer, frames: list[pd.DataFrame]) -> None:
    """Each frame's answer from 4 threads (``ROUNDS`` times over) equals its sequential answer exactly."""
    expected = [transformer(frame) for frame in frames]
    with ThreadPoolExecutor(4) as pool:
        futures = [(i, pool.submit(transformer, frame)) for _ in range(ROUNDS) for i, frame in enumerate(frames)]
        answers = [(i, future.result()) for i, future in futures]
    for i, got in answers:
        pd.testing.assert_frame_equal(got, expected[i], check_exact=True, obj=f"frame {i} from 4 threads")


def _tokenizations(model):
    """``(role -> token ids of texts)`` of a model's input builder: the one tokenizer truncates queries and documents
    to different lengths."""
    if hasattr(model, "text_encoder"):  # the bi-encoders
        return lambda role, texts: model.text_encoder.inputs(texts, role)["input_ids"].tolist()
    if hasattr(model, "encoder"):  # SPLADE
        return lambda role, texts: model.inputs(texts, role)["input_ids"].tolist()
    return lambda role, texts: (model.inputs.queries if role == "query" else model.inputs.docs)(texts)


@pytest.mark.parametrize("family", ["TITE", "Aggretriever", "Splade", "SparseCE"])
def test_queries_and_documents_tokenized_from_four_threads_keep_their_lengths(models, family):
    """Tokenizing is a small part of a model's call, so the end-to-end tests below rarely catch one thread's
    truncation length leaking into another's; here threads do nothing else."""
    tokenized = _tokenizations(models[family])
    texts = _docs(120, 40, n=8)["text"].tolist()
    expected = {role: tokenized(role, texts) for role in ("query", "doc")}
    with ThreadPoolExecutor(4) as pool:
        roles = ["query", "doc"] * 100
        answers = list(pool.map(lambda role: tokenized(role, texts), roles))
    wrong = sum(answer != expected[role] for role, answer in zip(roles, answers, strict=True))
    assert wrong == 0, f"{wrong} of {len(roles)} calls got another call's truncation"


@pytest.mark.parametrize("family", ["TITE", "BertBiEncoder", "Aggretriever", "Splade"])
def test_an_encoder_from_four_threads_answers_as_sequential_calls(models, family):
    """Queries, documents and a result frame (scoring) through one model: query and document lengths interleave."""
    _assert_same_answers(models[family], ENCODER_FRAMES)


@pytest.mark.parametrize("family", ["SparseCE", "MonoCE", "CELI", "Splade"])
def test_a_scorer_from_four_threads_answers_as_sequential_calls(models, family):
    scorer = models[family].scorer() if family == "Splade" else models[family]
    _assert_same_answers(scorer, RERANK_FRAMES)


def test_splade_retrieval_through_pisa_from_four_threads(models, tmp_path):
    docs = _docs(30, 20, n=12)
    build_splade(tmp_path / "splade", docs.to_dict("records"), models)
    _assert_same_answers(models["Splade"].retriever(str(tmp_path / "splade"), num_results=5), QUERY_FRAMES)


def test_dense_retrieval_through_a_flex_index_from_four_threads(models, tmp_path):
    """The retriever ``t.load`` gives a dense index folder: the query encoder >> the FlexIndex's."""
    from pyterrier_tite.store.flex import open_flex_retriever

    build_dense(tmp_path / "dense", _docs(30, 30, n=12).to_dict("records"), models)
    _assert_same_answers(models["TITE"].query_encoder() >> open_flex_retriever(str(tmp_path / "dense"), 5),
                         QUERY_FRAMES)  # fmt: skip
