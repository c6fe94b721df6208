"""Cross-encoder score heads (mean pooling / CELI): formulas against brute force, identical on a standard BERT
cross-encoder and the sparse cross-encoder with the same weights, shared query states, empty segments, gradients."""

from __future__ import annotations

import pytest
import torch
from _tiny import bert_config, bert_config_like, sparse_ce

from pyterrier_tite.models import SparseCrossEncoder
from pyterrier_tite.models.cross_encoder.celi import (
    CeliHead,
    MeanPoolHead,
    PairStates,
    pair_states_from_bert,
    pair_states_from_sparse,
)

ATOL = 1e-5
CLS, SEP = 1, 2
QUERIES = [[5, 6, 7], [8]]
DOCS = [[[9, 10, 11, 12], [13]], [[14, 15, 16, 17, 18, 19]]]


pytestmark = pytest.mark.usefixtures("single_thread")


def sparse_model(**overrides) -> SparseCrossEncoder:
    return sparse_ce(None, True, vocab_size=32, max_position_embeddings=32, cls_token_id=CLS, sep_token_id=SEP,
                     **overrides)  # fmt: skip


def heads(hidden: int = 16, token_dim: int = 8) -> dict[str, torch.nn.Module]:
    torch.manual_seed(1)
    return {"mean": MeanPoolHead(hidden), "celi": CeliHead(hidden, token_dim)}


def sparse_states(model, queries=QUERIES, docs=DOCS) -> PairStates:
    return pair_states_from_sparse(model(queries, docs).segments)


def bert_inputs(queries=QUERIES, docs=DOCS):
    rows = [([CLS, *q, SEP, *d, SEP], len(q) + 2) for q, ds in zip(queries, docs, strict=True) for d in ds]
    length = max(len(r) for r, _ in rows)
    ids = torch.tensor([r + [0] * (length - len(r)) for r, _ in rows])
    types = torch.tensor([[0] * n + [1] * (len(r) - n) + [0] * (length - len(r)) for r, n in rows])
    return ids, types, (ids != 0).long()


def brute_force(states_rows, head: torch.nn.Module, name: str) -> torch.Tensor:
    """Per pair from explicit token lists: rows = (cls [H], query tokens [n, H], doc tokens [m, H], seps [k, H])."""
    scores = []
    for cls, query, doc, seps in states_rows:
        if name == "mean":
            tokens = torch.cat([cls[None], query, doc, seps])
            scores.append(head.linear(tokens)[:, 0].mean())
        else:
            late = torch.zeros(())
            for qv in head.token(query):
                if len(doc):
                    late = late + max(float(qv @ dv) for dv in head.token(doc))
            scores.append(head.cls(cls)[0] + late)
    return torch.stack(scores)


def rows_from_bert(hidden, queries=QUERIES, docs=DOCS):
    rows, n = [], 0
    for q, ds in zip(queries, docs, strict=True):
        for d in ds:
            h = hidden[n]
            lq, ld = len(q), len(d)
            rows.append((h[0], h[1 : 1 + lq], h[lq + 2 : lq + 2 + ld], torch.stack([h[lq + 1], h[lq + 2 + ld]])))
            n += 1
    return rows


def test_heads_match_brute_force_on_a_standard_cross_encoder():
    from transformers import BertModel

    torch.manual_seed(2)
    bert = BertModel(bert_config(32)).eval()
    ids, types, mask = bert_inputs()
    with torch.no_grad():
        hidden = bert(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
        states = pair_states_from_bert(hidden, types, mask)
        for name, head in heads().items():
            expected = brute_force(rows_from_bert(hidden), head, name)
            torch.testing.assert_close(head(states), expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["mean", "celi"])
def test_heads_give_the_same_scores_on_bert_and_on_the_equivalent_sparse_cross_encoder(name):
    """All flags, no window: the sparse cross-encoder IS the BERT cross-encoder, so every head must agree."""
    from transformers import BertModel

    model = sparse_model()
    bert = BertModel(bert_config_like(model.config)).eval()
    state = {k: v for k, v in model.bert.state_dict().items() if not k.endswith("position_ids")}
    bert.load_state_dict(state, strict=False)
    head = heads()[name]
    ids, types, mask = bert_inputs()
    with torch.no_grad():
        standard = head(pair_states_from_bert(bert(ids, mask, types).last_hidden_state, types, mask))
        sparse = head(sparse_states(model))
    torch.testing.assert_close(sparse, standard, atol=ATOL, rtol=0)


@pytest.mark.parametrize("window", [0, 2, None], ids=["w0", "w2", "full"])
def test_heads_on_sparse_cross_encoder_with_shared_query_match_brute_force(window):
    model = sparse_model(attention_window_size=window, query_cls_attention=False, query_doc_attention=False)
    with torch.no_grad():
        out = model(QUERIES, DOCS)
        seg = out.segments
        assert seg.query_index is not None and seg.query.shape[0] == len(QUERIES)
        states = pair_states_from_sparse(seg)
        rows, n = [], 0
        for qi, (q, ds) in enumerate(zip(QUERIES, DOCS, strict=True)):
            for d in ds:
                query, doc = seg.query[qi], seg.doc[n]
                rows.append((seg.cls[n, 0], query[: len(q)], doc[: len(d)], torch.stack([query[len(q)], doc[len(d)]])))
                n += 1
        for name, head in heads().items():
            torch.testing.assert_close(head(states), brute_force(rows, head, name), atol=ATOL, rtol=0)


@pytest.mark.parametrize("token_dim", [1, 32, 64])
def test_celi_token_dim_is_configurable_and_score_is_the_sum_of_its_parts(token_dim):
    head = CeliHead(16, token_dim=token_dim)
    assert head.token.out_features == token_dim
    with torch.no_grad():
        states = sparse_states(sparse_model(attention_window_size=1))
        s_cls, s_late = head.score_parts(states)
        torch.testing.assert_close(head(states), s_cls + s_late)
    assert s_cls.shape == s_late.shape == (3,) and s_late.abs().sum() > 0


def test_empty_query_or_doc_gives_zero_late_interaction():
    model = sparse_model(attention_window_size=2, query_cls_attention=False, query_doc_attention=False)
    head = CeliHead(16, 8)
    with torch.no_grad():
        states = sparse_states(model, [[], [5, 6]], [[[7, 8]], [[], [9]]])
        s_cls, s_late = head.score_parts(states)
        assert torch.isfinite(head(states)).all() and torch.isfinite(MeanPoolHead(16)(states)).all()
    assert s_late[0] == 0 and s_late[1] == 0 and s_late[2] != 0


def test_gradients_reach_heads_and_encoder():
    model = sparse_model(attention_window_size=2, query_cls_attention=False, query_doc_attention=False)
    head = CeliHead(16, 8)
    s_cls, s_late = head.score_parts(sparse_states(model))
    (s_cls.square().sum() + s_late.square().sum()).backward()
    for module in (head, model.bert.encoder):
        for name, p in module.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
