"""Re-rank BM25 with a sparse cross-encoder (SparseCE) and compare in one pt.Experiment.

    python examples/rerank_bm25_with_sparse_ce.py --model webis/sparse-cross-encoder-4-512
    python examples/rerank_bm25_with_sparse_ce.py --quick       # offline: the shipped MiniLM start point, 10 queries

--model is a trained SparseCE: a hub id or a folder written by `pyterrier-tite train-reranker` / save_pretrained.
The default, the shipped MiniLM, runs offline but gets a new, untrained score head, so its row shows the pipeline,
not a trained model's quality; the MiniLM bi-encoder (trained) re-ranks the same candidates beside it.
"""

import argparse

import pyterrier as pt
from pyterrier.measures import nDCG

import pyterrier_tite as t
from pyterrier_tite.start_points import resolve

parser = argparse.ArgumentParser(description="BM25 >> SparseCE on an ir_datasets collection")
parser.add_argument("--model", default="minilm", help="SparseCE hub id or folder (default: the shipped MiniLM)")
parser.add_argument("--dataset", default="vaswani", help="ir_datasets id or alias")
parser.add_argument("--depth", type=int, default=50, help="BM25 candidates re-ranked per query")
parser.add_argument("--quick", action="store_true", help="10 queries and 10 candidates each")
args = parser.parse_args()

dataset = t.datasets.get_dataset(args.dataset)
topics, qrels = dataset.get_topics(), dataset.get_qrels()
depth = 10 if args.quick else args.depth
if args.quick:
    topics = topics.head(10)

bm25 = t.bm25(args.dataset)
candidates = bm25 % depth >> dataset.text_loader()  # the top `depth` with their texts
sparse_ce = t.SparseCE(resolve(args.model))  # a plain BERT gets the released window of 4 document tokens
minilm = t.BertBiEncoder.from_pretrained(resolve("minilm"))

table = pt.Experiment(
    [bm25 % depth, candidates >> sparse_ce, candidates >> minilm.scorer()],
    topics, qrels, eval_metrics=[nDCG @ 10, "mrt"],
    names=["BM25", f"BM25 >> SparseCE ({args.model})", "BM25 >> MiniLM bi-encoder"], round=4,
)  # fmt: skip
print(table.to_string(index=False))
