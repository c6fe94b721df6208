# %% [markdown]
# # 01 · First stages: BM25 on PISA, ir_datasets ids, the TREC DL runs
#
# Every model in this package sits behind a first stage. This notebook shows the three ways to get one, all offline:
# BM25 over a PISA index built once and cached (no Java), any [ir_datasets](https://ir-datasets.com) id or one of the
# short aliases, and the provided BM25 top-100 runs of TREC DL 2019 / 2020 (the local MS MARCO collection is partial,
# so DL is always reranked). It ends with `pt.Experiment` and a paired significance test.
#
# Runs offline when `IR_DATASETS_HOME` points at a mirror.
# `PYTERRIER_TITE_QUICK=1` shrinks it to two collections.

# %%
import logging
import os
import warnings
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the committed outputs
warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message="There are shared pipeline components")  # pt.Experiment's hint
logging.disable(logging.INFO)  # ir_datasets' "[INFO] Opening <path>" lines
QUICK = os.environ.get("PYTERRIER_TITE_QUICK") == "1"
FIGURES = os.environ.get("PYTERRIER_TITE_FIGURES")  # a folder to save the figures in (default: none)

import matplotlib.pyplot as plt
import pandas as pd
import pyterrier as pt
from pyterrier.measures import AP, R, nDCG

import pyterrier_tite as t

# %% [markdown]
# ## Collections by name
#
# `t.datasets.get_dataset(name)` takes any ir_datasets id or one of these aliases (`cisi` / `cacm` are read from
# `$IR_DATASETS_HOME/local/`, `cranfield-graded` turns Cleverdon's codes into graded gains).

# %%
pd.DataFrame(sorted(t.datasets.ALIASES.items()), columns=["alias", "ir_datasets id"])

# %% [markdown]
# ## BM25 through PISA
#
# `t.bm25(name)` builds the PISA index on first use (cached under `$PYTERRIER_TITE_HOME`, default
# `~/.cache/pyterrier_tite`) and returns a retriever; `% k` cuts the ranking, `>>` composes.

# %%
bm25 = t.bm25("vaswani")
vaswani = t.datasets.get_dataset("vaswani")
topics = vaswani.get_topics()
(bm25 % 3)(topics.head(2))

# %% [markdown]
# ## `pt.Experiment` with significance
#
# Three BM25 parameter settings on vaswani, the first as baseline: `+` / `-` count queries that improve / degrade,
# `p-value corrected` is a paired t-test against the baseline, Holm-corrected over the systems compared (shown for
# nDCG@10; `pt.Experiment` reports it for every measure).

# %%
systems = {
    "BM25 k1=0.9 b=0.4 (default)": bm25,
    "BM25 k1=1.2 b=0.75": t.bm25("vaswani", k1=1.2, b=0.75),
    "BM25 k1=0.9 b=0 (no length normalisation)": t.bm25("vaswani", b=0.0),
}
experiment = pt.Experiment(
    list(systems.values()), topics, vaswani.get_qrels(), [nDCG @ 10, AP, R @ 100],
    names=list(systems), baseline=0, correction="holm", round=4,
)
experiment[["name", "nDCG@10", "AP", "R@100", "nDCG@10 +", "nDCG@10 -", "nDCG@10 p-value corrected"]]

# %% [markdown]
# Per query, the difference is far from uniform: most queries move little, a few move a lot, which is why a
# significance test (not the mean alone) decides.

# %%
per_query = pt.Experiment(
    list(systems.values())[:3:2], topics, vaswani.get_qrels(), [nDCG @ 10], names=["default", "b=0"], perquery=True
)
wide = per_query.pivot_table(index="qid", columns="name", values="value")
delta = (wide["b=0"] - wide["default"]).sort_values()
fig, ax = plt.subplots(figsize=(7, 3))
ax.bar(range(len(delta)), delta.values, width=1.0, color=["tab:red" if d < 0 else "tab:green" for d in delta])
ax.axhline(0, color="black", linewidth=0.8)
ax.set(title="vaswani: BM25 without length normalisation vs default, per query",
       xlabel="query (sorted by difference)", ylabel="Δ nDCG@10 (b=0 − b=0.4)")
fig.tight_layout()
if FIGURES:
    fig.savefig(Path(FIGURES) / "bm25_per_query_delta.png", dpi=110)
plt.show()

# %% [markdown]
# ## The TREC DL runs
#
# `t.trec_dl_bm25('2019')` serves the provided BM25 top-100 of TREC DL 2019 with the passage text attached, so
# `dl19 >> reranker` is a complete pipeline (notebook 02).

# %%
dl19 = t.trec_dl_bm25("2019")
dl19_ds = t.datasets.get_dataset("dl19")
dl19(dl19_ds.get_topics().head(1))[["qid", "query", "docno", "rank", "score", "text"]].head(3)

# %% [markdown]
# ## BM25 across collections
#
# One pipeline per collection: full retrieval on the full collections (scifact indexed as title + text), the
# provided top-100 on DL.

# %%
names = ["vaswani", "cranfield-graded", "dl19"] if QUICK else [
    "vaswani", "cranfield-graded", "scifact", "cisi", "cacm", "dl19", "dl20"]
rows = []
for name in names:
    ds = t.datasets.get_dataset(name)
    system = t.trec_dl_bm25(name[2:] and "20" + name[2:], text=False) if name.startswith("dl") else t.bm25(
        "cranfield" if name == "cranfield-graded" else name)
    res = pt.Experiment([system], ds.get_topics(), ds.get_qrels(), [nDCG @ 10, AP, R @ 100], names=[name])
    rows.append(res.assign(queries=len(ds.get_topics())))
table = pd.concat(rows).set_index("name").round(4)
table

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
x = range(len(table))
for i, (measure, color) in enumerate([("nDCG@10", "tab:blue"), ("AP", "tab:orange"), ("R@100", "tab:green")]):
    ax.bar([v + (i - 1) * 0.27 for v in x], table[measure], width=0.27, label=measure, color=color)
ax.set_xticks(list(x), [f"{n}\n({q} q)" for n, q in zip(table.index, table["queries"])], fontsize=8)
ax.set(title="BM25 (PISA, k1=0.9, b=0.4) per collection", ylabel="score (0–1)", ylim=(0, 1.15),
       yticks=[0, 0.2, 0.4, 0.6, 0.8, 1.0])
ax.legend(ncols=3, fontsize=8, loc="upper left")
fig.tight_layout()
if FIGURES:
    fig.savefig(Path(FIGURES) / "bm25_collections.png", dpi=110)
plt.show()

# %% [markdown]
# DL 2019 / 2020 are the provided top-100 runs (R@100 is their recall), the others full retrieval; the same numbers
# with their command are in [docs/results.md](../docs/results.md#bm25-baselines). Figures (`build_notebooks.py
# --figures`): `docs/figures/bm25_collections.png`, `docs/figures/bm25_per_query_delta.png`.
