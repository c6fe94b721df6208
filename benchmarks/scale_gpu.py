"""The dense part of ``benchmarks/scale.py`` on a GPU: exact search with the vectors on the GPU (pyterrier_dr's torch
retriever through :func:`~pyterrier_tite.store.flex.open_flex_retriever`; the FAISS here is CPU-only, so no HNSW /
IVF), up to 8.8M vectors measured rather than extrapolated, with the time to copy the vectors onto the GPU and its
peak memory; and the encoding rates on the GPU (each model's default there: bf16 autocast). Same synthetic vectors and
passages as the CPU run. ``--minilm`` / ``--splade`` name the model folders where the start-point packages are not
installed.

    python benchmarks/scale_gpu.py --sizes 10000 100000 1000000 8841823 --out scale_gpu.json     # on the GPU machine
    python benchmarks/scale_gpu.py --from-json scale_gpu.json --into-results experiments/efficiency/results.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import MS_MARCO, at, encoding_rates, exponent, measure_dense  # noqa: E402


def gpu_report(sizes: list[int], sample: int, args: argparse.Namespace) -> dict:
    """The dense part on the GPU: exact search at each size (8.8M measured where asked) and the encoding rates."""
    import torch

    device = args.device
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            rows.append({"docs": n, **measure_dense(n, Path(tmp), device, searches=("exact",))})
            print(f"{n:>9,} vectors  dense on {device}: {rows[-1]}", flush=True)
    rates = encoding_rates(sample, device, args.encode_batch, args.minilm, args.splade)
    print("encoding on the GPU, docs/s:", rates, flush=True)
    ns = [r["docs"] for r in rows]
    keys = ("exact_ms_per_query", "exact_load_s", "gpu_peak_mb")
    fits = {key: exponent(ns, [r.get(key, 0.0) for r in rows]) for key in keys}
    marco = {"dense_exact_ms_per_query": at(MS_MARCO, ns, [r["exact_ms_per_query"] for r in rows])}
    marco.update({f"{model}_encode_gpu_min": MS_MARCO / rates[f"{model}_docs_per_s"] / 60
                  for model in ("tite", "splade", "splade_toks") if f"{model}_docs_per_s" in rates})  # fmt: skip
    print("MS MARCO 8.8M passages on this GPU:", json.dumps({k: round(v, 2) for k, v in marco.items()}))
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else device
    return {"gpu": name, "sizes": sizes, "rows": {"dense": rows}, "exponents": fits,
            "encoding": {**rates, "sample": sample, "batch_size": args.encode_batch}, "ms_marco_8.8M": marco,
            "machine": {"cpus": os.cpu_count(), "torch": torch.__version__}}  # fmt: skip


def gpu_results_tables(report: dict, date: str) -> dict:
    """The GPU run's tables: exact dense search per size, and encoding rates with their 8.8M minutes."""
    machine = {"device": report["gpu"], "precision": "fp32 search, bf16 autocast encoding"}
    command = "bash scripts/gpu_check.sh scale (python benchmarks/scale_gpu.py)"
    common = {"date": date, "machine": machine, "commands": [command], "label": "case",
              "section": "Scale: 10k to 1M documents", "format": {"digits": 2}}  # fmt: skip
    search = [{"id": f"dense-exact-{r['docs']}", "label": f"dense exact on the GPU, {r['docs']:,} vectors",
               "values": {"ms / query": r["exact_ms_per_query"], "load onto GPU s": r["exact_load_s"],
                          "GPU peak MB": r.get("gpu_peak_mb"), "index MB": r["size_mb"]}}
              for r in report["rows"]["dense"]]  # fmt: skip
    encoding, marco = report["encoding"], report["ms_marco_8.8M"]
    names = {"tite": "TITE (6 x 384, from MiniLM)", "splade": "SPLADE (2 layers, shipped)",
             "splade_toks": "SPLADE to term dicts (what PISA gets)"}
    encode = [{"id": f"{model.replace('_', '-')}-encode",
               "label": f"{names[model]} encoding, {encoding['sample']:,} passages",
               "values": {"docs / s": encoding[f"{model}_docs_per_s"],
                          "8.8M minutes": marco[f"{model}_encode_gpu_min"]}}
              for model in names if f"{model}_docs_per_s" in encoding]  # fmt: skip
    return {
        "scale_gpu": {**common, "title": f"Exact dense search on a GPU ({report['gpu']}), synthetic 384-d vectors",
                      "columns": ["ms / query", "load onto GPU s", "GPU peak MB", "index MB"], "rows": search},
        "scale_gpu_encode": {**common, "title": f"Encoding on a GPU ({report['gpu']}), synthetic passages",
                             "columns": ["docs / s", "8.8M minutes"], "rows": encode},
    }  # fmt: skip


def gpu_efficiency_row(report: dict, study: dict) -> dict:
    """One row of the page for the GPU: the passages re-rankers (when the study has ``passages_h200``), exact search
    at the largest size and TITE's 8.8M encoding minutes."""
    largest = max(report["sizes"])
    passages = "passages_h200" in study["tables"]
    what = "On a GPU ({}): {}exact dense search of {:,} vectors, ms per query / 8.8M passages encoded by TITE " \
        "(6 x 384), minutes".format(report["gpu"], "MonoCE / SparseCE w=4 (bf16, their default) vs the CrossEncoder "
                                    "(fp32), DL19 passages, batch 256 / " if passages else "", largest)
    cells = [[f"dense-exact-{largest}", "ms / query"], ["tite-encode", "8.8M minutes", "scale_gpu_encode"]]
    if passages:
        cells = [["monoce-bf16", "speed-up, batch 256", "passages_h200"],
                 ["sparsece-w4-bf16", "speed-up, batch 256", "passages_h200"], *cells]
    return {"what": what, "table": "scale_gpu", "cells": cells}


def write_results(report: dict, path: Path) -> None:
    """The GPU tables and one efficiency row into a study's results.json (the CPU scale rows stay)."""
    study = json.loads(path.read_text())
    study["tables"].update(gpu_results_tables(report, datetime.date.today().isoformat()))
    kept = [e for e in study.get("efficiency", []) if not e["table"].startswith("scale_gpu")]
    study["efficiency"] = kept + [gpu_efficiency_row(report, study)]
    path.write_text(json.dumps(study, ensure_ascii=False, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000, MS_MARCO])
    parser.add_argument("--encode-sample", type=int, default=20_000, help="passages timed for the encoding rates")
    parser.add_argument("--encode-batch", type=int, default=256, help="encoding batch size")
    parser.add_argument("--minilm", default=None, help="MiniLM-shaped BERT folder (default: the shipped start point)")
    parser.add_argument("--splade", default=None, help="SPLADE folder (default: the shipped 2-layer model)")
    parser.add_argument("--device", default="cuda", help="the torch device (cpu only to try the script)")
    parser.add_argument("--out", default=None, help="write the measurements as JSON here")
    parser.add_argument("--from-json", default=None, help="report an earlier run's --out file instead of measuring")
    parser.add_argument("--into-results", default=None, help="write the tables into this study results.json")
    args = parser.parse_args(argv)
    if args.from_json:
        report = json.loads(Path(args.from_json).read_text())
    else:
        report = gpu_report(sorted(args.sizes), args.encode_sample, args)
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1))
    if args.into_results:
        write_results(report, Path(args.into_results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
