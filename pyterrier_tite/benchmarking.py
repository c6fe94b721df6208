"""Measurement helpers shared by ``benchmarks/`` and the notebooks: best-of-n timing and peak memory of one call, and
the random-weight models the efficiency benchmarks compare (speed does not depend on the weights; what is compared is
one run's ratios, never absolute times)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import BertConfig, BertForSequenceClassification

from pyterrier_tite.models import SparseCrossEncoder, SparseCrossEncoderConfig
from pyterrier_tite.models.cross_encoder.tokenization import SparseCrossEncoderBatch
from pyterrier_tite.models.sparse_ce.graphs import SparseCEGraphs, capture_graph

# ---- timing and memory of one call


def peak_bytes(fn, device: torch.device | str = "cpu") -> int:
    """Highest net allocation during ``fn()``: CUDA's peak-memory counter on a GPU, else the CPU profiler's memory
    events (allocations held before the call, e.g. inputs and weights, are not counted)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # raw allocator records (op-level numbers are net per op and hide transients freed inside an op)
    events = [(e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    current = peak = 0
    for _, delta in sorted(events, key=lambda x: x[0]):
        current += delta
        peak = max(peak, current)
    return peak


def best_time(fn, repeats: int, min_seconds: float, device: torch.device | str = "cpu") -> float:
    """Seconds per call after a warm-up, over at least ``repeats`` runs, until ``min_seconds`` passed (at most 100).
    CPU: the best run (stable on a shared machine). GPU: the median, timed with CUDA events (kernels run
    asynchronously; the host clock would time the launches)."""
    cuda = torch.device(device).type == "cuda"
    fn()  # warm-up (Triton compiles here)
    if cuda:
        torch.cuda.synchronize()
    times: list[float] = []
    while len(times) < repeats or (sum(times) < min_seconds and len(times) < 100):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] if cuda else min(times)


# ---- re-rankers: the HF BERT baseline and SparseCE settings (MiniLM-L6 dimensions)

MINILM = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)


@dataclass
class Setting:
    name: str
    window: int | None  # None: full attention
    symmetric: bool
    baseline: bool = False


def build(setting: Setting, max_positions: int, baseline_attention: str = "sdpa") -> torch.nn.Module:
    if setting.baseline:
        config = BertConfig(
            **MINILM, max_position_embeddings=max_positions, num_labels=1, attn_implementation=baseline_attention
        )
        return BertForSequenceClassification(config).eval()
    config = SparseCrossEncoderConfig(
        **MINILM,
        max_position_embeddings=max_positions,
        attention_window_size=setting.window,
        query_cls_attention=setting.symmetric,
        query_doc_attention=setting.symmetric,
    )
    return SparseCrossEncoder(config).eval()


def runner(model: torch.nn.Module, setting: Setting, query: torch.Tensor, docs: torch.Tensor, graphs: bool = False):
    """A no-grad forward pass over one query and its batch of docs (inputs built beforehand). ``graphs``: CUDA
    graphs, SparseCE through the model's own graph runner (its host-side padding and input copies included)."""
    if setting.baseline:
        batch = docs.shape[0]
        ids = torch.cat([torch.full((batch, 1), 101), query.expand(batch, -1), torch.full((batch, 1), 102), docs,
                         torch.full((batch, 1), 102)], dim=1).to(model.device)  # fmt: skip
        types = torch.cat([torch.zeros(batch, query.shape[1] + 2), torch.ones(batch, docs.shape[1] + 1)], 1).long()
        types = types.to(model.device)
        run = torch.no_grad()(lambda: model(input_ids=ids, token_type_ids=types).logits)
        if graphs:  # one CUDA graph on the fixed inputs (no copies): the baseline's launch-free best case
            graph, out = capture_graph(run, ids.device)

            def replay():
                graph.replay()
                return out

            return replay
        return run
    if graphs:
        replay = SparseCEGraphs(lambda batch: {"score": model(batch).logits}, model, model.config.pad_token_id)
        cpu_batch = SparseCrossEncoderBatch.from_lists([query[0]], [list(docs)])
        return torch.no_grad()(lambda: replay(cpu_batch)["score"])
    batch_inputs = model.make_batch([query[0]], [list(docs)])
    return torch.no_grad()(lambda: model(batch_inputs).logits)


# ---- encoders: TITE variants and BERT of one depth and width, their FLOPs, batches and one timed pass


def tite_variants(layers: int, width: int) -> dict[str, dict]:
    """Pooling (kernels / strides) and per-layer sizes of each variant; None = no pooling in that layer."""
    from pyterrier_tite.models.tite.from_bert import pooling_layers

    late = pooling_layers(layers, min(9, layers - 1), "late")
    staggered = pooling_layers(layers, min(9, layers - 1), "staggered")
    k3 = pooling_layers(layers, min(6, layers - 1), "late")
    grow = [width] * layers
    for i, p in enumerate(late):  # widen in the pooling layers up to twice the width (multiples of 64)
        if p:
            step = sum(late[: i + 1])
            grow[i] = max(grow[i - 1], width + (width * step // sum(late)) // 64 * 64)
    return {
        "bert-ours": {"kernels": [None] * layers, "hidden": [width] * layers},
        "tite-late": {"kernels": one_vector([2 if p else None for p in late]), "hidden": [width] * layers},
        "tite-staggered": {"kernels": one_vector([2 if p else None for p in staggered]), "hidden": [width] * layers},
        "tite-k3": {"kernels": one_vector([3 if p else None for p in k3]), "hidden": [width] * layers},
        "tite-upscale": {"kernels": one_vector([2 if p else None for p in late]), "hidden": grow},
    }


def one_vector(kernels: list, max_len: int = 512) -> list:
    """Shallow models cannot reach one vector with k = 2 / 3: the last layer then pools globally (as tite_from_bert)."""
    from pyterrier_tite.models.tite.configuration import output_shapes

    shapes = output_shapes(max_len, kernels, kernels)
    if shapes[-1] > 1:
        kernels = [*kernels[:-1], shapes[-2]]
    return kernels


def make_tite(variant: dict, vocab: int, max_len: int):
    from pyterrier_tite.models import TiteConfig, TiteModel

    hidden = variant["hidden"]
    kernels = list(variant["kernels"])
    config = TiteConfig(
        vocab_size=vocab,
        num_hidden_layers=len(hidden),
        hidden_sizes=hidden,
        num_attention_heads=[h // 32 for h in hidden],
        intermediate_sizes=[4 * h for h in hidden],
        kernel_sizes=kernels,
        strides=kernels,
        max_position_embeddings=max_len,
        absolute_positional_embedding_type="learned",
        relative_positional_embedding_type="none",
        norm_location="post",
        norm_type="layer",
        hidden_act="gelu_pytorch_tanh",
        pooling_location="intra",
    )
    return TiteModel(config).eval()


def make_bert(width: int, layers: int, vocab: int, max_len: int):
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=vocab,
        hidden_size=width,
        num_hidden_layers=layers,
        num_attention_heads=width // 32,
        intermediate_size=4 * width,
        max_position_embeddings=max_len,
        attn_implementation="sdpa",
    )
    return BertModel(config, add_pooling_layer=False).eval()


def model_flops(length: int, kernels, hidden, strides=None, ffn=None) -> int:
    """Matmul FLOPs of one sequence of ``length`` tokens; per layer a kernel (None: no pooling), a width, a stride
    (default: the kernel) and an FFN width (default: 4x the width). An intra-pooling layer computes Q from its n_out
    rows, K/V from its n_in rows, attention, output projection and FFN."""
    from pyterrier_tite.models.tite.configuration import pooled_length

    strides = kernels if strides is None else strides
    ffn = [4 * h for h in hidden] if ffn is None else ffn
    total, n, h_in = 0, length, hidden[0]
    for k, s, h, f in zip(kernels, strides, hidden, ffn, strict=True):
        n_out = pooled_length(n, k, s)
        total += 2 * n_out * h_in * h + 4 * n * h_in * h + 4 * n_out * n * h + 2 * n_out * h * h + 4 * n_out * h * f
        n, h_in = n_out, h
    return total


def load_texts(num_docs: int, num_queries: int, seed: int, path: str | None = None) -> tuple[list[str], list[str]]:
    """Half scifact documents, half DL passages, and scifact / DL queries, sampled with ``seed``; from ``path`` (a
    JSON file {"docs": [...], "queries": [...]} written by ``--dump-texts``) on a machine without the collections."""
    import json
    import random

    if path is not None:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        return saved["docs"][:num_docs], saved["queries"][:num_queries]
    from pyterrier_tite import datasets

    rng = random.Random(seed)
    queries = []
    scifact = datasets.get_dataset("scifact")
    sci_docs = [f"{d['title']} {d['text']}" for d in scifact.get_corpus_iter(verbose=False)]
    dl_docs = [d["text"] for d in datasets.get_dataset("dl19").get_corpus_iter(verbose=False)]
    docs = rng.sample(sci_docs, num_docs // 2) + rng.sample(dl_docs, num_docs - num_docs // 2)
    for name in ("scifact", "dl19", "dl20"):
        queries += list(datasets.get_dataset(name).get_topics()["query"])
    return docs, rng.sample(queries, min(num_queries, len(queries)))


def batches(tokenizer, texts: list[str], max_length: int, batch_size: int) -> list[dict]:
    texts = sorted(texts, key=lambda t: len(tokenizer(t, truncation=True, max_length=max_length)["input_ids"]))
    out = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start : start + batch_size]
        enc = tokenizer(list(chunk), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        out.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})
    return out


def time_pass(model, data: list[dict]) -> float:
    began = time.perf_counter()
    with torch.inference_mode():
        for batch in data:
            model(**batch)
    return time.perf_counter() - began
