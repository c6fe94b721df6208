"""What dynamic int8 costs a trained cross-encoder's rankings: DL19 BM25 top-100 re-ranked in fp32 and int8 (issue 65).

The question: does ``MonoCE(dtype="int8")`` keep the fp32 ranking (Spearman per query >= 0.98) and nDCG@10 (within
0.01), and at what speed? Variants: every encoder linear layer int8 (what ``dtype="int8"`` does), only the attention
projections int8, every layer but the feed-forward output, and (on a CPU with native bf16) bf16 autocast. Each
re-ranks the judged DL19 queries' BM25 top-100 in one call; printed per variant: nDCG@10, ms per pair, and Spearman
per query against fp32 (min, mean, share of queries >= 0.98).

No trained cross-encoder ships offline, so ``--folder`` is one trained here, e.g. 150 steps of the distillation recipe
(about 10 minutes on 2 cores)::

    python -m experiments.distill_rerankers --output-dir runs/int8-mono --models mono --seeds 43 --max-steps 150 \\
        --max-queries 600 --threads 1 --precision fp32 --evaluate dl19 --eval-depth 20 --train-doc-max-length 128
    python benchmarks/int8_quality.py --folder runs/int8-mono/mono/seed-43
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import nn


def quantized(scorer, keep) -> nn.Module:
    """A copy of ``scorer`` with the encoder's linear layers whose names pass ``keep`` dynamic int8 (per channel)."""
    heads = ("classifier", "pooler", "head")
    names = {
        name
        for name, module in scorer.named_modules()
        if type(module) is nn.Linear and name.startswith("backbone.") and not any(h in name for h in heads)
    }
    spec = dict.fromkeys(filter(keep, names), torch.ao.quantization.per_channel_dynamic_qconfig)
    copy = torch.ao.quantization.quantize_dynamic(scorer, spec, dtype=torch.qint8, inplace=False).eval()
    copy._packed_encoder = None
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", required=True, help="a trained cross-encoder folder (see the module docstring)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    from ir_measures import calc_aggregate, nDCG

    import pyterrier_tite as t
    from pyterrier_tite.devices import cpu_has_native_bf16
    from pyterrier_tite.pt.first_stage import TREC_DL

    dataset = t.datasets.get_dataset(TREC_DL["2019"])
    qrels = dataset.get_qrels()
    run = t.trec_dl_bm25("2019")(dataset.get_topics())
    run = run[run["qid"].isin(set(qrels["qid"]))].reset_index(drop=True)
    qrels = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    fp32 = t.MonoCE(args.folder, device="cpu")
    int8 = t.MonoCE(args.folder, device="cpu", dtype="int8")
    variants = {
        "fp32": fp32.scorer,
        "int8, every layer (dtype='int8')": int8.scorer,
        "int8, attention only": quantized(fp32.scorer, lambda name: ".attention." in name),
        "int8, all but feed-forward out": quantized(
            fp32.scorer, lambda name: ".attention." in name or not name.endswith("output.dense")
        ),
    }
    precisions = dict.fromkeys(variants, "fp32")
    if cpu_has_native_bf16():  # for comparison: bf16 autocast, where the CPU computes it natively
        variants["bf16 (dtype=torch.bfloat16)"] = fp32.scorer
        precisions["bf16 (dtype=torch.bfloat16)"] = "bf16"
    qids = run["qid"].to_numpy()
    keys = list(zip(run["qid"], run["docno"], strict=True))
    reference = None
    print(f"{len(run)} pairs of {len(set(qids))} judged DL19 queries; {torch.get_num_threads()} threads")
    print(f"{'variant':<34} {'nDCG@10':>8} {'ms/pair':>8} {'Spearman min':>13} {'mean':>6} {'>=0.98':>7}")
    for name, scorer in variants.items():
        fp32.scorer, fp32.precision = scorer, precisions[name]
        start = time.perf_counter()
        out = fp32.transform(run)
        seconds = time.perf_counter() - start
        scores = out.set_index(["qid", "docno"])["score"].reindex(keys).to_numpy()
        reference = scores if reference is None else reference
        ranked = out.rename(columns={"qid": "query_id", "docno": "doc_id"})
        ndcg = calc_aggregate([nDCG @ 10], qrels, ranked)[nDCG @ 10]
        rho = np.array([spearmanr(scores[qids == q], reference[qids == q]).statistic for q in dict.fromkeys(qids)])
        print(
            f"{name:<34} {ndcg:8.4f} {1000 * seconds / len(run):8.2f} {rho.min():13.3f} {rho.mean():6.3f} "
            f"{(rho >= 0.98).mean():7.2f}"
        )


if __name__ == "__main__":
    main()
