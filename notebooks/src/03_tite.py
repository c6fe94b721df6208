# %% [markdown]
# # 03 · TITE: a bi-encoder whose layers pool the sequence
#
# TITE (token-independent text encoder) pools the token sequence inside its layers (kernel k, stride s), so later
# layers see ever fewer rows and a document ends as one vector. This notebook indexes a collection with TITE into a
# `pyterrier_dr.FlexIndex` and retrieves from it, draws the pooling schedule (sequence length per layer) and measures
# documents per second of TITE variants against BERT with the functions of `benchmarks/encode_throughput.py`.
#
# `PYTERRIER_TITE_QUICK=1`: a 200-document sample of Cranfield, 16 documents in the throughput benchmark.

# %%
import logging
import math
import os
import shutil
import sys
import warnings
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the committed outputs
warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message="There are shared pipeline components")  # pt.Experiment's hint
warnings.filterwarnings("ignore", message="IProgress not found")
logging.disable(logging.INFO)  # ir_datasets' "[INFO] Opening <path>" lines
QUICK = os.environ.get("PYTERRIER_TITE_QUICK") == "1"
THREADS = int(os.environ.get("OMP_NUM_THREADS", "2"))  # a test runner sets each notebook's share
FIGURES = os.environ.get("PYTERRIER_TITE_FIGURES")  # a folder to save the figures in (default: none)
WORK = Path("runs/notebooks-quick" if QUICK else "runs/notebooks") / "03_tite"  # its own folder: indexes

import matplotlib.pyplot as plt
import pandas as pd
import pyterrier as pt
import pyterrier_dr
import torch
from pyterrier.measures import AP, R, nDCG

import pyterrier_tite as t
from pyterrier_tite.start_points import resolve

# %% [markdown]
# ## Index with TITE, retrieve from a FlexIndex
#
# `t.TITE.from_bert(folder)` inserts pooling into a BERT checkpoint: here the shipped MiniLM-L6 with k = s = 2 in
# layers 4 and 5 and a global pooling in layer 6 (`num_pooling_layers=3`). A released TITE loads with
# `t.TITE.from_pretrained('webis/tite-2-late-msmarco')` (notebook 06). The unpooled start, mean-pooled MiniLM
# (`t.BertBiEncoder`), and BM25 are the baselines; one `pt.Experiment` compares the three.

# %%
torch.set_num_threads(THREADS)
minilm = resolve("minilm")
tite = t.TITE.from_bert(minilm, tite_kwargs={"num_pooling_layers": 3}, doc_max_length=256)
mean = t.BertBiEncoder.from_pretrained(minilm, pooling="mean", normalize=False)
dataset = t.datasets.get_dataset("cranfield-graded")
corpus = list(t.datasets.get_dataset("cranfield").get_corpus_iter(verbose=False))
if QUICK:
    corpus = corpus[:200]
print(f"{len(corpus)} documents; TITE layers: kernel sizes {tite.model.config.kernel_sizes}")

indexes = {}
for name, model in {"tite": tite, "mean": mean}.items():
    path = WORK / f"cranfield.{name}.flex"
    shutil.rmtree(path, ignore_errors=True)
    index = pyterrier_dr.FlexIndex(str(path), verbose=False)
    (model >> index).index(corpus)  # encodes chunk by chunk (transform_iter)
    indexes[name] = index
retrieve_tite = tite.query_encoder() >> indexes["tite"].np_retriever()
(retrieve_tite % 3)(dataset.get_topics().head(1))[["qid", "query", "docno", "score", "rank"]]

# %% [markdown]
# The same model reranks too: `tite.scorer()` scores a result frame's (query, text) pairs.

# %%
rerank = t.bm25("cranfield") % 5 >> dataset.text_loader() >> tite.scorer()
rerank(dataset.get_topics().head(1))[["qid", "docno", "score", "rank"]]

# %%
topics = dataset.get_topics().head(30 if QUICK else None)
systems = {
    "BM25": t.bm25("cranfield"),
    "TITE (MiniLM + pooling), dot": retrieve_tite,
    "mean-pooled MiniLM, dot": mean.query_encoder() >> indexes["mean"].np_retriever(),
}
experiment = pt.Experiment(list(systems.values()), topics, dataset.get_qrels(), [nDCG @ 10, AP, R @ 100],
                           names=list(systems), baseline=0, correction="holm", round=4)
experiment[["name", "nDCG@10", "AP", "R@100", "nDCG@10 +", "nDCG@10 -", "nDCG@10 p-value corrected"]]

# %% [markdown]
# Nothing here is trained: inserting pooling into MiniLM costs most of its quality (the pooled layers were never
# trained to pool), so TITE sits far below its unpooled start.
#
# ## TITE for the documents, the teacher for the queries
#
# Pooling hurts a short query most (10 word pieces leave one row after a few pooling layers), while a query is cheap
# to encode with the unpooled model, once per search. `query_model=` gives a TITE another bi-encoder for its queries:
# documents (the indexing cost) stay TITE's, queries are MiniLM's, so the TITE index above is reused unchanged.
# `python -m experiments.distill_tite` trains TITE's documents towards MiniLM's vectors and saves its student this way
# (`query_encoder/` inside the checkpoint; `t.TITE.from_pretrained(folder)` loads both); after 500 CPU steps such a
# student reaches about 0.59 nDCG@10 on scifact against MiniLM's 0.64
# ([docs/results.md](../docs/results.md#the-teacher-as-query-encoder-the-default-since)). Undistilled, as here, the
# teacher's queries already recover part of the loss:

# %%
mixed = t.TITE.from_bert(minilm, tite_kwargs={"num_pooling_layers": 3}, doc_max_length=256, query_model=mean)
systems["TITE documents, MiniLM queries"] = mixed.query_encoder() >> indexes["tite"].np_retriever()
experiment = pt.Experiment(list(systems.values()), topics, dataset.get_qrels(), [nDCG @ 10, AP, R @ 100],
                           names=list(systems), baseline=0, correction="holm", round=4)
experiment[["name", "nDCG@10", "AP", "R@100", "nDCG@10 +", "nDCG@10 -", "nDCG@10 p-value corrected"]]

# %% [markdown]
# The paper's TITE is pretrained from scratch with pooling (~21B tokens), which this CPU cannot repeat.
#
# ## The pooling schedule
#
# A pooling layer with kernel k and stride s turns L rows into ⌈max(0, L − k) / s⌉ + 1. The variants of the
# throughput benchmark (12 layers) and the MiniLM TITE above, for a 512-token input:

# %%
import pyterrier_tite.benchmarking as bench  # noqa: E402  (what benchmarks/encode_throughput.py runs)


def schedule(kernels, strides, length=512):
    """Sequence length entering the model and after each layer."""
    out = [length]
    for k, s in zip(kernels, strides):
        n = out[-1]
        out.append(n if k is None or s is None or n <= 1 else math.ceil(max(0, n - k) / s) + 1)
    return out


variants = bench.tite_variants(12, 384)
schedules = {"BERT (no pooling)": schedule([None] * 12, [None] * 12)}
for name in ("tite-late", "tite-staggered", "tite-k3"):
    kernels = variants[name]["kernels"]
    schedules[name] = schedule(kernels, kernels)
schedules["MiniLM TITE above (6 layers)"] = schedule(tite.model.config.kernel_sizes, tite.model.config.strides)
pd.DataFrame({k: pd.Series(v) for k, v in schedules.items()}).astype("Int64").rename_axis("after layer").T

# %%
fig, ax = plt.subplots(figsize=(7, 3.6))
for (name, lengths), marker in zip(schedules.items(), "osD^v"):
    ax.step(range(len(lengths)), lengths, where="post", marker=marker, markersize=4, label=name)
ax.set_yscale("log", base=2)
ax.set_yticks([1, 4, 16, 64, 256, 512], ["1", "4", "16", "64", "256", "512"])
ax.set_xticks(range(13))
ax.set(title="TITE pooling schedule: rows after each layer (512-token input)",
       xlabel="layer (0 = input)", ylabel="sequence length (rows, log scale)")
ax.grid(alpha=0.3)
ax.legend(fontsize=8, loc="lower left")
fig.tight_layout()
if FIGURES:
    fig.savefig(Path(FIGURES) / "tite_pooling_schedule.png", dpi=110)
plt.show()

# %% [markdown]
# ## Documents per second: TITE variants vs BERT
#
# `benchmarks/encode_throughput.py`, run small: 12 layers × 384 (MiniLM width), random weights, fp32, model forward
# only, **one CPU thread**, 32 scifact documents cut to 512 tokens (quick mode: 8 cut to 256), batch 16 sorted by
# length; every model keeps its
# fastest of the rounds (run round-robin, so background load hurts all alike). `bert-hf` is `transformers.BertModel`
# with SDPA, `bert-ours` our encoder without pooling. The right panel cites the H100 (bf16, width 768, batch 512)
# figures of [docs/results.md](../docs/results.md#encoding-throughput-tite-vs-bert).

# %%
import random  # noqa: E402

from transformers import AutoTokenizer  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(0)
scifact = [f"{d['title']} {d['text']}" for d in t.datasets.get_dataset("scifact").get_corpus_iter(verbose=False)]
texts = random.Random(0).sample(scifact, 8 if QUICK else 32)
tokenizer = AutoTokenizer.from_pretrained(minilm)
data = bench.batches(tokenizer, texts, max_length=256 if QUICK else 512, batch_size=8 if QUICK else 16)
lengths = [int(n) for b in data for n in b["attention_mask"].sum(1)]
models = {"bert-hf": bench.make_bert(384, 12, len(tokenizer), 512)}
models |= {name: bench.make_tite(variants[name], len(tokenizer), 512) for name in variants}
for model in models.values():
    bench.time_pass(model, data[:1])  # warm-up
best = {name: float("inf") for name in models}
for _ in range(1 if QUICK else 2):
    for name, model in models.items():
        best[name] = min(best[name], bench.time_pass(model, data))
bert_flops = sum(bench.model_flops(n, [None] * 12, [384] * 12) for n in lengths)
throughput = pd.DataFrame([{
    "model": name, "docs/s": len(texts) / seconds, "x bert-hf": best["bert-hf"] / seconds,
    "FLOP ratio": 1.0 if name == "bert-hf" else bert_flops / sum(
        bench.model_flops(n, variants[name]["kernels"], variants[name]["hidden"]) for n in lengths),
} for name, seconds in best.items()]).set_index("model").round(2)
print(f"{len(texts)} scifact documents, mean {sum(lengths) / len(lengths):.0f} tokens")
throughput

# %%
cited_h100 = pd.Series({"bert-hf": 10288, "bert-ours": 9104, "tite-late": 21973, "tite-staggered": 32485,
                        "tite-k3": 15834, "tite-upscale": 19724})
fig, (ax_cpu, ax_gpu) = plt.subplots(1, 2, figsize=(11, 3.6))
colors = ["grey", "darkgrey", "tab:blue", "tab:green", "tab:orange", "tab:purple"]
for ax, values, title in ((ax_cpu, throughput["docs/s"], "measured here: CPU, 1 thread, fp32, width 384"),
                          (ax_gpu, cited_h100, "cited: H100, bf16, width 768, batch 512")):
    bars = ax.bar(values.index, values.values, color=colors)
    for bar, v in zip(bars, values.values):
        ax.text(bar.get_x() + bar.get_width() / 2, v, f"{v / values['bert-hf']:.2f}x", ha="center", va="bottom",
                fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel("documents per second")
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax.set_ylim(0, values.max() * 1.15)
fig.suptitle("Encoding throughput, 12 layers (labels: speed-up over bert-hf)", fontsize=11)
fig.tight_layout()
if FIGURES:
    fig.savefig(Path(FIGURES) / "tite_throughput.png", dpi=110)
plt.show()

# %% [markdown]
# Single-threaded on a CPU the measured speed-ups track the FLOP ratios (the idle-machine run in the docs: late 3.76x,
# staggered 6.73x at 2 threads); on the H100 they stay below them because the GPU waits on the host at these sizes.
# Figures (`build_notebooks.py --figures`): `docs/figures/tite_pooling_schedule.png`,
# `docs/figures/tite_throughput.png`.
