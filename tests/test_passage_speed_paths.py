"""The CPU speed paths of the full-attention cross-encoders (issue 65): the packed forward scores as the
``transformers`` forward does, all-pairs length sorting keeps input order, dynamic int8 runs and agrees with fp32,
and bf16 on a CPU without native bf16 warns once."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest
import torch
from _tiny import bert_config
from _tolerance import assert_float_close
from scipy.stats import spearmanr
from transformers import BertForSequenceClassification

from pyterrier_tite import devices
from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer
from pyterrier_tite.models.int8_linear import Int8Linear

pytestmark = pytest.mark.usefixtures("single_thread")

QUERIES = [[5, 6, 7], [8, 9], [30]]
DOCS = [[[10, 11, 12, 13], [14], [15, 16, 17, 18, 19, 20]], [[21, 22], [23, 24, 25]], [list(range(40, 60))]]


def _bert(layers: int = 2, hidden: int = 32) -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = bert_config(100, hidden=hidden, layers=layers, heads=4, num_labels=1, cls_token_id=1, sep_token_id=2)
    return BertForSequenceClassification(config).eval()


@pytest.mark.parametrize("head", ["cls", "mean", "celi"])
def test_packed_forward_scores_as_transformers(head):
    scorer = CrossEncoderScorer(_bert(), head=head).eval()
    with torch.no_grad():
        packed = scorer(QUERIES, DOCS)
        scorer.packed = False
        padded = scorer(QUERIES, DOCS)
    assert packed.shape == (6,)
    assert_float_close(packed, padded)


def test_packed_forward_is_inference_only():
    """With grad (training) the transformers forward runs: the packed one has no backward of its own to trust."""
    scorer = CrossEncoderScorer(_bert()).eval()
    calls = []
    scorer._packed = lambda: calls.append(1)
    scorer(QUERIES, DOCS).sum().backward()
    assert calls == []


def test_all_pairs_sorting_keeps_input_order():
    """Full-attention scoring sorts every pair of a call by length (across queries); scores stay in input order."""
    from pyterrier_tite.models.cross_encoder.pair_scoring import score_by_query

    class Inputs:
        fit_doc = staticmethod(lambda q, d: d)

    scorer = CrossEncoderScorer(_bert()).eval()
    qids = ["a", "b", "a", "c", "b", "a"]
    query_ids = dict(zip("abc", QUERIES, strict=True))
    doc_ids = [DOCS[0][0], DOCS[1][0], DOCS[0][1], DOCS[2][0], DOCS[1][1], DOCS[0][2]]
    got = score_by_query(scorer, Inputs(), qids, query_ids, doc_ids, 2, "cpu", "fp32")
    with torch.no_grad():
        one_by_one = [float(scorer([query_ids[q]], [[d]])) for q, d in zip(qids, doc_ids, strict=True)]
    assert_float_close(torch.tensor(got), torch.tensor(one_by_one))


@pytest.mark.parametrize("backbone", ["bert", "sparse"])
def test_int8_runs_and_agrees_with_fp32(backbone):
    """Both backbones quantize; the joint int8 Q|K|V layer gives exactly what the three int8 layers give."""
    if backbone == "sparse":
        from _tiny import tiny_sparse_ce

        scorer = CrossEncoderScorer(tiny_sparse_ce(3, False, hidden=64)).eval()
    else:
        scorer = CrossEncoderScorer(_bert(layers=2, hidden=64)).eval()
    int8 = scorer.quantized_int8()
    assert type(scorer.backbone.bert.encoder.layer[0].attention.self.query) is torch.nn.Linear  # the original stays
    assert type(int8.backbone.classifier) is torch.nn.Linear  # the head stays float32
    query = int8.backbone.bert.encoder.layer[0].attention.self.query
    assert type(query) is Int8Linear and query.weight_t.dtype == torch.int8
    assert query.weight_scale.shape == (query.out_features,)  # one scale per output channel
    assert query.inverse is not None  # a LayerNorm feeds it: outlier channels migrated
    assert int8.backbone.bert.encoder.layer[0].output.dense.inverse is None  # a GELU feeds this one
    torch.manual_seed(1)
    queries = [torch.randint(3, 100, (4,)).tolist()]
    docs = [[torch.randint(3, 100, (int(n),)).tolist() for n in torch.randint(5, 30, (30,))]]
    with torch.no_grad():
        a, b = scorer(queries, docs), int8(queries, docs)
    assert torch.isfinite(b).all()
    assert spearmanr(a.numpy(), b.numpy()).statistic > 0.8
    assert (a - b).abs().max() < 0.1 * a.abs().max() + 1e-3
    attentions = [m for m in int8.modules() if hasattr(m, "int8_projections")]
    assert len(attentions) == 2 and "int8_projections" not in str(list(int8.state_dict()))
    for attention in attentions:
        del attention.int8_projections  # back to one int8 layer per projection
    with torch.no_grad():
        separate = int8(queries, docs)
    assert_float_close(b, separate)


def test_int8_reranker_dtype(tmp_path):
    from _tiny import save_tiny_bert

    import pyterrier_tite as t

    folder = save_tiny_bert(tmp_path / "bert")
    reranker = t.MonoCE(folder, dtype="int8", device="cpu")
    assert reranker.precision == "int8"
    assert reranker != t.MonoCE(folder, device="cpu")
    frame = pd.DataFrame(
        {"qid": ["1", "1"], "query": ["a query", "a query"], "docno": ["d1", "d2"], "text": ["some text", "more"]}
    )
    assert len(reranker(frame)) == 2
    with pytest.raises(ValueError, match="CPU only"):
        devices.resolve_precision("int8", "cuda", int8=True)
    with pytest.raises(ValueError, match="dtype must be"):
        devices.resolve_precision("int8", "cpu")  # models without an int8 path refuse it


@pytest.mark.parametrize("native", [False, True])
def test_bf16_on_cpu_without_native_bf16_warns_once(monkeypatch, native):
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: native)
    monkeypatch.setattr(devices, "_warned_bf16", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert devices.resolve_precision(torch.bfloat16, "cpu") == "bf16"
        assert devices.resolve_precision("bf16", "cpu") == "bf16"
        assert devices.resolve_precision(torch.float32, "cpu") == "fp32"
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if native:
        assert messages == []
    else:
        assert len(messages) == 1 and "dtype=torch.float32" in messages[0] and "avx512_bf16" in messages[0]


@pytest.mark.parametrize("window", [0, 2, None])
@pytest.mark.parametrize("symmetric", [False, True])
def test_packed_sparse_forward_scores_as_padded(window, symmetric):
    """The sparse cross-encoder's CPU inference packs its doc rows and skips the last layer's query / doc rows when
    only scores are read: scores, [CLS] states and every real token's state stay those of the padded forward."""
    from _tiny import tiny_sparse_ce

    model = tiny_sparse_ce(window, symmetric)
    queries = [[5, 6, 7], [8], [30, 31]]
    docs = [[[10, 11, 12, 13], [14], list(range(40, 60))], [[21, 22], [23, 24, 25]], [list(range(60, 90))]]
    with torch.no_grad():
        scores = model(queries, docs, cls_only=True)
        full = model(queries, docs)
        model.bert.packed = False
        padded = model(queries, docs)
    assert scores.segments is None and padded.segments is not None
    assert_float_close(scores.logits, padded.logits)
    assert_float_close(full.logits, padded.logits)
    lengths = padded.segments.doc_lengths
    real = torch.arange(padded.segments.doc.shape[1])[None, :] < lengths[:, None]
    assert_float_close(full.segments.doc[real], padded.segments.doc[real])
    assert bool((full.segments.doc[~real] == 0).all())
    assert_float_close(full.segments.cls, padded.segments.cls)
    q_real = torch.arange(padded.segments.query.shape[1])[None, :] < padded.segments.query_lengths[:, None]
    assert_float_close(full.segments.query[q_real], padded.segments.query[q_real])


def test_packed_sparse_forward_is_cpu_inference_only():
    from _tiny import tiny_sparse_ce

    from pyterrier_tite.models.sparse_ce import modeling

    model = tiny_sparse_ce(2, False)
    calls = []
    original = modeling.packed_forward
    modeling.packed_forward = lambda *a: calls.append(1) or original(*a)
    try:
        model([[5]], [[[10, 11]]]).logits.sum().backward()  # grad: the padded forward
        assert calls == []
        with torch.no_grad():
            model([[5]], [[[10, 11]]])
        assert calls == [1]
    finally:
        modeling.packed_forward = original


@pytest.mark.parametrize(("pooling", "normalize"), [("cls", True), ("mean", False)])
def test_packed_biencoder_encodes_as_transformers(tmp_path, pooling, normalize):
    """BertBiEncoder's inference sorts texts by length and packs each batch: the vectors, in input order, are those
    of the padded ``transformers`` forward in input order."""
    from _tiny import save_tiny_bert

    import pyterrier_tite as t

    encoder = t.BertBiEncoder.from_pretrained(save_tiny_bert(tmp_path / "bert", layers=2), pooling, normalize)
    texts = ["a", "a much longer text with many more words in it", "", "medium length text", "x y"]
    text_encoder = encoder.text_encoder
    with torch.no_grad():
        packed = text_encoder.encode_docs(texts, batch_size=2)
        text_encoder.packed = False
        padded = torch.cat([text_encoder.encode_docs([text]) for text in texts])
    assert packed.shape == (5, 16)
    assert_float_close(packed, padded)


def test_bf16_packed_rows_round_up_to_few_shapes_and_score_as_the_exact_count(monkeypatch):
    """Under CPU bf16 autocast the packed rows are rounded up to a few row counts (oneDNN builds a kernel per count),
    the extra rows are scratch: MonoCE's and SparseCE's scores, and every token's state, are those of the exact count;
    the states run in bf16 (the residual stream too)."""
    from _tiny import tiny_sparse_ce

    from pyterrier_tite.models import fused_linear, packed_bert
    from pyterrier_tite.models.packed_bert import PackedEncoder, PackedPairs
    from pyterrier_tite.models.sparse_ce import packed

    mono, sparse = CrossEncoderScorer(_bert()).eval(), tiny_sparse_ce(2, False)
    queries, docs = [[5, 6, 7], [8], [30, 31]], [[[10, 11, 12], [14], list(range(40, 60))], [[21, 22]], [[60, 61]]]
    pairs = PackedPairs.from_lists(queries, docs, 1, 2, "cpu")
    assert fused_linear.gemm_rows(pairs.layout.total, torch.zeros(1)) == pairs.layout.total  # fp32: exact counts
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert fused_linear.gemm_rows(pairs.layout.total, torch.zeros(1)) > pairs.layout.total
        rounded = (mono(queries, docs), sparse(queries, docs, cls_only=True).logits, PackedEncoder(mono.backbone))
        tokens = rounded[2].tokens(pairs)
        for module in (fused_linear, packed_bert, packed):
            monkeypatch.setattr(module, "gemm_rows", lambda rows, x: rows)
        exact = (mono(queries, docs), sparse(queries, docs, cls_only=True).logits)
        assert tokens.dtype == torch.bfloat16 and tokens.shape[0] == pairs.layout.total
        assert_float_close(tokens, PackedEncoder(mono.backbone).tokens(pairs), dtype=torch.bfloat16)
    for got, expected in zip(rounded[:2], exact, strict=True):
        assert_float_close(got, expected, dtype=torch.bfloat16)
