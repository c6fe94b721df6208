"""Score heads compute in float32 under autocast while the encoder runs in bf16.

Why: a score made by a bf16 product keeps 8 significant bits, so different documents get the same score (13 of 100
BM25 candidates per TREC DL query did) and their order is arbitrary. Pinned for every cross-encoder backbone x head:
bf16 scores carry float32 resolution and are distinct, the encoder really ran in bf16, the float32 head of a
transformers classifier is that classifier's own forward, heads still train under autocast, and a model cast to bf16
as a whole still scores (its heads then run in bf16: what the user asked for)."""

from __future__ import annotations

import pytest
import torch
from _tolerance import assert_float_close
from torch import nn
from transformers import BertConfig, BertForSequenceClassification, ElectraConfig, ElectraForSequenceClassification

from pyterrier_tite.devices import in_dtype, in_float32
from pyterrier_tite.models import SparseCrossEncoder, SparseCrossEncoderConfig
from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer

pytestmark = pytest.mark.usefixtures("single_thread")

CLS, SEP, VOCAB = 1, 2, 100
SIZES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, num_labels=1)


def backbone(kind: str) -> nn.Module:
    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, max_position_embeddings=64, cls_token_id=CLS, sep_token_id=SEP, **SIZES)
    if kind == "sparse":
        return SparseCrossEncoder(SparseCrossEncoderConfig(attention_window_size=4, **common))
    if kind == "bert":
        return BertForSequenceClassification(BertConfig(**common))
    return ElectraForSequenceClassification(ElectraConfig(embedding_size=64, **common))


def scorer(kind: str, head: str) -> CrossEncoderScorer:
    model = CrossEncoderScorer(backbone(kind), head=head, token_dim=16)
    torch.manual_seed(1)
    for module in model.modules():  # heads start at scales a trained model has, not at zero bias
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.bias, std=0.5)
    return model.eval()


def inputs(n_queries: int = 8, docs_per_query: int = 8) -> tuple[list[list[int]], list[list[list[int]]]]:
    g = torch.Generator().manual_seed(2)

    def text(length: int) -> list[int]:
        return torch.randint(3, VOCAB, (length,), generator=g).tolist()

    queries = [text(5) for _ in range(n_queries)]
    docs = [[text(20) for _ in range(docs_per_query)] for _ in range(n_queries)]
    return queries, docs


CASES = [("sparse", "cls"), ("sparse", "mean"), ("sparse", "celi"), ("bert", "cls"), ("bert", "mean"),
         ("bert", "celi"), ("electra", "cls")]  # fmt: skip


def encoder_linears(model: CrossEncoderScorer) -> list[nn.Linear]:
    return [m for m in model.backbone.base_model.encoder.modules() if isinstance(m, nn.Linear)]


@pytest.mark.parametrize("kind,head", CASES)
def test_bf16_scores_keep_float32_resolution_while_the_encoder_runs_in_bf16(kind, head):
    model = scorer(kind, head)
    encoder_dtypes = []
    for linear in encoder_linears(model):  # some are fused into one product: those record nothing
        linear.register_forward_hook(lambda m, i, out: encoder_dtypes.append(out.dtype))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        scores = model(*inputs())
    assert encoder_dtypes and set(encoder_dtypes) == {torch.bfloat16}
    assert scores.dtype == torch.float32 and scores.shape == (64,)
    on_bf16_grid = scores == scores.bfloat16().float()
    assert int(on_bf16_grid.sum()) <= 4, f"{int(on_bf16_grid.sum())} of 64 scores are bf16 values"
    assert len(set(scores.tolist())) == 64


@pytest.mark.parametrize("kind", ["bert", "electra"])
def test_the_float32_head_is_the_classifiers_own_forward(kind):
    model = scorer(kind, "cls")
    queries, docs = inputs(3, 4)
    with torch.no_grad():
        ours = model(queries, docs)
        batch = model._pairs(queries, docs)
        theirs = model.backbone(**vars(batch)).logits.squeeze(-1)
    # inference runs the packed (padding-free) path, a different summation order than transformers' padded forward:
    # equal within float32 tolerance, which a bf16-rounded head (relative error ~4e-3) would fail
    assert ours.dtype == torch.float32
    assert_float_close(ours, theirs, dtype=torch.float32)


@pytest.mark.parametrize("kind,head", CASES)
def test_heads_and_encoder_train_under_autocast(kind, head):
    model = scorer(kind, head).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = model(*inputs(2, 3))
    assert scores.dtype == torch.float32
    scores.square().mean().backward()
    head_params = list((model.head or model.backbone.classifier).parameters())
    for param in [*head_params, encoder_linears(model)[-1].weight]:
        assert param.grad is not None and torch.isfinite(param.grad).all() and param.grad.abs().sum() > 0


@pytest.mark.parametrize("kind,head", [("sparse", "cls"), ("sparse", "celi"), ("bert", "cls"), ("bert", "mean")])
def test_a_model_cast_to_bf16_scores_in_bf16(kind, head):
    model = scorer(kind, head).to(torch.bfloat16)
    with torch.no_grad():
        scores = model(*inputs(2, 3))
    assert scores.dtype == torch.bfloat16 and torch.isfinite(scores).all()


def test_in_float32_leaves_autocast_and_upcasts_floating_tensors_only():
    a, b = torch.randn(4, 8).bfloat16(), torch.randn(8, 3)
    seen = {}

    def product(x, y, scale, index):
        seen.update(x=x.dtype, index=index.dtype, scale=scale)
        return x @ y * scale

    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = in_float32(product, a, b, 2.0, index=torch.arange(3))
        low = in_dtype(torch.bfloat16, product, a, b, 2.0, index=torch.arange(3))
    assert seen == dict(x=torch.bfloat16, index=torch.int64, scale=2.0)  # the last call: bf16 in, ints untouched
    assert out.dtype == torch.float32 and torch.equal(out, a.float() @ b * 2.0)
    assert low.dtype == torch.bfloat16
