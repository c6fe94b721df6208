# %% [markdown]
# # 06 · Released checkpoints: `from_pretrained('<hub id>')` for every family
#
# Every released checkpoint family this package reads, loaded by its Hugging Face hub id and used in a pipeline:
# the sparse cross-encoder, TITE (bi-encoder and pre-training layouts), SPLADE (one model, and a query/doc pair) and
# Aggretriever. `t.load('<hub id>')` returns the right transformer for any of them.
#
# > **These are tiny random stand-ins, not the real models.** This notebook runs offline against the hub-layout
# > fixtures (`HF_HOME` pointed at them, `HF_HUB_OFFLINE=1`): checkpoints with the released file
# > names, tensor names, configs and tokenizer formats, but random weights of hidden size 32 or less and a
# > 187-word vocabulary. So every score below is meaningless as retrieval quality; what it shows is that each
# > layout loads exactly and computes what the family's reference code computed from the same files (the
# > "max |Δ|" columns). With network access and the default `HF_HOME`, the same calls download the real models.

# %%
import logging
import os
import shutil
import warnings
from pathlib import Path

# The Hugging Face cache is the environment's (HF_HOME); the fixtures keep the outputs each family's reference code
# computed from the same files beside it (HF_HOME/expected), so run this notebook with HF_HOME pointing at them
HF_HOME = Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser()
EXPECTED = HF_HOME / "expected"
if not EXPECTED.is_dir():
    raise FileNotFoundError("this notebook compares against the hub-layout fixtures: set HF_HOME to them")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers / huggingface_hub are imported
os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the committed outputs
warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message="IProgress not found")
logging.disable(logging.INFO)
QUICK = os.environ.get("PYTERRIER_TITE_QUICK") == "1"  # this notebook is small either way
WORK = Path("runs/notebooks-quick" if QUICK else "runs/notebooks") / "06_released"  # its own folder: indexes
shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)

import json

import numpy as np
import pandas as pd
import pyterrier_dr

import pyterrier_tite as t


def reference(repo: str) -> tuple[dict, dict]:
    """The fixture's inputs and the outputs the family's reference code computed from the same files."""
    folder = EXPECTED / repo.replace("/", "--", 1)
    with open(folder / "inputs.json") as f, open(folder / "outputs.json") as g:
        return json.load(f), json.load(g)


# %% [markdown]
# ## `t.load`: one call for any hub id
#
# The format is recognised from the checkpoint (config fields and files), not from the name.

# %%
repos = ["webis/sparse-cross-encoder-4-4096", "webis/tite-2-late-msmarco", "webis/tite-2-late",
         "naver/splade-cocondenser-ensembledistil", "castorini/aggretriever-cocondenser"]
pd.DataFrame({"hub id": repos, "t.load(hub id) returns": [repr(t.load(r)) for r in repos]})

# %% [markdown]
# ## Sparse cross-encoder: `webis/sparse-cross-encoder-4-4096`
#
# A reranker: (qid, query, docno, text) in, scores out. Window, attention pattern and length caps come from the
# checkpoint (4096 positions, so documents are not cut at 512 tokens). Two queries, three documents each, some
# longer than 512 tokens.

# %%
repo = "webis/sparse-cross-encoder-4-4096"
inputs, outputs = reference(repo)
sce = t.SparseCE.from_pretrained(repo)
frame = pd.DataFrame([{"qid": f"q{q}", "query": query, "docno": f"q{q}-d{d}", "text": doc}
                      for q, (query, docs) in enumerate(zip(inputs["queries"], inputs["docs"]))
                      for d, doc in enumerate(docs)])
scored = sce(frame)
expected = {f"q{q}-d{d}": v for q, row in enumerate(outputs["logits_target"]) for d, v in enumerate(row)}
scored = scored.assign(reference=scored["docno"].map(expected), words=scored["text"].str.split().str.len())
print(f"{sce}: window {sce.scorer.config.attention_window_size}, "
      f"{sce.scorer.config.max_position_embeddings} positions; "
      f"max |Δ| vs reference {np.abs(scored['score'] - scored['reference']).max():.1e}")
scored[["qid", "docno", "words", "score", "reference", "rank"]]

# %% [markdown]
# ## TITE bi-encoder: `webis/tite-2-late-msmarco` (Lightning IR layout)
#
# Lengths (query 32, doc 256), the `[QUE]` / `[DOC]` markers and the similarity (dot product) are read from the
# checkpoint. Index the documents into a FlexIndex, retrieve, and check the vectors against the reference's.

# %%
repo = "webis/tite-2-late-msmarco"
inputs, outputs = reference(repo)
tite = t.TITE.from_pretrained(repo)
print(f"query/doc length {tite.query_max_length}/{tite.doc_max_length}, "
      f"markers {tite.query_marker!r}/{tite.doc_marker!r}")
docs = pd.DataFrame({"docno": [f"d{i}" for i in range(len(inputs["docs"]))], "text": inputs["docs"]})
queries = pd.DataFrame({"qid": [f"q{i}" for i in range(len(inputs["queries"]))], "query": inputs["queries"]})
index = pyterrier_dr.FlexIndex(str(WORK / "tite.flex"), verbose=False)
(tite >> index).index(docs.to_dict("records"))
run = (tite.query_encoder() >> index.np_retriever())(queries)
want = np.array(outputs["scores"])
run = run.assign(reference=[want[int(q[1:]), int(d[1:])] for q, d in zip(run["qid"], run["docno"])])
print(f"max |Δ| vs reference: query vectors "
      f"{np.abs(tite.encode_queries(inputs['queries']) - np.array(outputs['query_embeddings'])).max():.1e}, "
      f"doc vectors {np.abs(tite.encode_docs(inputs['docs']) - np.array(outputs['doc_embeddings'])).max():.1e}")
run[["qid", "docno", "score", "reference", "rank"]]

# %% [markdown]
# ## TITE pre-training layout: `webis/tite-2-late`
#
# The pre-trained encoder (MAE + BOW heads dropped, the position table read from its tied copy in the MAE head). It
# was saved without markers, so they are switched off; the one output row per text is the vector. The pooling
# schedule, read from the checkpoint: k = s = 2 in layers 4-12.

# %%
repo = "webis/tite-2-late"
inputs, outputs = reference(repo)
encoder = t.TITE.from_pretrained(repo, query_marker=None, doc_marker=None, doc_max_length=512)
vectors = encoder.encode_docs(inputs["texts"])
want = np.array(outputs["last_hidden_state"])[:, 0]
print(f"kernel sizes per layer: {encoder.model.config.kernel_sizes}")
print(f"{len(vectors)} texts -> vectors {vectors.shape}; max |Δ| vs reference {np.abs(vectors - want).max():.1e}")

# %% [markdown]
# ## SPLADE: `naver/splade-cocondenser-ensembledistil`, and a query/doc pair
#
# One MLM for queries and documents, or two (`naver/efficient-splade-V-large-query` / `-doc`) through
# `Splade.from_pretrained(query=..., doc=...)`. `splade.indexer(path)` builds a PISA index of the term weights,
# `splade.retriever(path)` searches it; `splade.scorer()` reranks without an index.

# %%
rows = []
for name, kwargs in {"naver/splade-cocondenser-ensembledistil": {"path": "naver/splade-cocondenser-ensembledistil"},
                     "efficient-splade-V-large query + doc": {"query": "naver/efficient-splade-V-large-query",
                                                              "doc": "naver/efficient-splade-V-large-doc"}}.items():
    splade = t.Splade.from_pretrained(**kwargs)
    inputs, outputs = reference(kwargs.get("path") or kwargs["doc"])
    docs = pd.DataFrame({"docno": [f"d{i}" for i in range(len(inputs["docs"]))], "text": inputs["docs"]})
    queries = pd.DataFrame({"qid": [f"q{i}" for i in range(len(inputs["queries"]))], "query": inputs["queries"]})
    path = WORK / f"splade-{len(rows)}.pisa"
    splade.indexer(str(path)).index(docs.to_dict("records"))
    run = splade.retriever(str(path))(queries)
    rescored = splade.scorer()(queries.merge(docs, how="cross"))
    want = np.array(outputs["scores"])
    got = rescored.pivot(index="qid", columns="docno", values="score").to_numpy()
    rows.append({"model": name, "pair": splade.is_pair, "terms per doc": float(np.mean(
        [len(x) for x in splade.doc_encoder()(docs)["toks"]])), "retrieved (q0)": " ".join(
        run[run["qid"] == "q0"]["docno"]), "max |Δ| scorer vs reference": f"{np.abs(got - want).max():.1e}",
        "max |Δ| PISA (quantised) vs reference": f"{np.abs(run['score'] - [want[int(q[1:]), int(d[1:])] for q, d in zip(run['qid'], run['docno'])]).max():.1e}"})
pd.DataFrame(rows).set_index("model").T

# %% [markdown]
# The PISA index stores weights quantised to integers, so its scores differ slightly from the exact ones.
#
# ## Aggretriever: `castorini/aggretriever-cocondenser` (pyserini layout)
#
# The MLM under `encoder.*` and the heads at the top level of `pytorch_model.bin`; 768-dim vectors (128 projected
# [CLS] + 640 aggregated lexical dims), query / doc lengths 32 / 512 as in pyserini.

# %%
repo = "castorini/aggretriever-cocondenser"
inputs, outputs = reference(repo)
agg = t.Aggretriever.from_pretrained(repo)
docs = pd.DataFrame({"docno": [f"d{i}" for i in range(len(inputs["docs"]))], "text": inputs["docs"]})
queries = pd.DataFrame({"qid": [f"q{i}" for i in range(len(inputs["queries"]))], "query": inputs["queries"]})
index = pyterrier_dr.FlexIndex(str(WORK / "aggretriever.flex"), verbose=False)
(agg >> index).index(docs.to_dict("records"))
run = (agg.query_encoder() >> index.np_retriever())(queries)
want = np.array(outputs["scores"])
run = run.assign(reference=[want[int(q[1:]), int(d[1:])] for q, d in zip(run["qid"], run["docno"])])
print(f"lengths {agg.query_max_length}/{agg.doc_max_length}; vectors {agg.encode_docs(inputs['docs']).shape}; "
      f"max |Δ| doc vectors {np.abs(agg.encode_docs(inputs['docs']) - np.array(outputs['doc_vectors'])).max():.1e}")
run[["qid", "docno", "score", "reference", "rank"]]

# %% [markdown]
# Every family computes what its reference computes from the same files (max |Δ| at float32 rounding; the tests
# check the same with `pytest -k hub`). Released checkpoints whose layouts these fixtures share but which have no
# fixture of their own (`webis/sparse-cross-encoder-4-512`, `webis/tite-2-late-upscale(-msmarco)`,
# `castorini/aggretriever-distilbert`) load through the same code paths, unverified here.

# %% [markdown]
# ## Save, package and load back as a PyTerrier artifact
#
# Every model of this package is a PyTerrier artifact. `save_pretrained(folder)` writes what a trained model is
# (weights, tokenizer, settings, `pt_meta.json` and a model card `README.md`; the training commands save this way),
# `pt.Artifact.load(folder)` gives the transformer back, and `build_package()` makes the `.tar.lz4` (plus a `.json`
# with its size and sha256) that `to_hf` uploads and the class's `from_url` / `from_hf` (`t.SparseCE.from_hf(repo)`)
# download, extract and load, safely when two processes fetch one package at once (PyTerrier's own
# `pt.Artifact.from_url` / `from_hf` then fail).
# Here the sparse cross-encoder and TITE from above make the round trip; the loaded models score exactly as the saved.

# %%
import pyterrier as pt

rows = []
for name, model, outputs_of in [
    ("sparse-ce", sce, lambda m: m(frame)["score"].to_numpy()),
    ("tite", tite, lambda m: m.encode_docs(inputs["docs"]) @ m.encode_queries(inputs["queries"]).T),
]:
    folder = WORK / f"my-{name}"
    model.save_pretrained(str(folder))
    loaded = pt.Artifact.load(str(folder))
    package = Path(loaded.build_package(verbose=False))  # beside the folder: my-<name>.tar.lz4 (+ .json)
    with open(f"{package}.json") as f:
        package_info = json.load(f)
    card = (folder / "README.md").read_text(encoding="utf-8").split("---")[1]
    rows.append({"model": repr(loaded), "pt.Artifact": isinstance(loaded, pt.Artifact),
                 "type / format": "/".join(pt.inspect.artifact_type_format(loaded)),
                 "package": package.name, "package KiB": round(package.stat().st_size / 1024),
                 "files": len(package_info["contents"]), "unpacked KiB": round(package_info["total_size"] / 1024),
                 "card tags": ", ".join(t for t in ("pyterrier", "pyterrier-artifact") if f"- {t}\n" in card),
                 "scores equal": bool(np.array_equal(outputs_of(model), outputs_of(loaded)))})
pd.DataFrame(rows).set_index("model").T

# %% [markdown]
# `loaded.to_hf('me/my-model')` would publish the same package with its card, and `t.SparseCE.from_hf('me/my-model')`
# load it anywhere (tests/test_artifact_packages.py does the download round trip against a local HTTP server for every
# model kind). An index built by `pyterrier-tite index` from such a folder keeps the model inside itself, so its
# package retrieves on another machine too: `pyterrier-tite retrieve --index <url of index.tar.lz4>`.
