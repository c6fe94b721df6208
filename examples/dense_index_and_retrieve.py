"""Index a collection with a dense bi-encoder into a FlexIndex, retrieve from it, and compare with BM25.

    python examples/dense_index_and_retrieve.py                                  # MiniLM (shipped), vaswani
    python examples/dense_index_and_retrieve.py --model webis/tite-2-late-msmarco --index vaswani.tite
    python examples/dense_index_and_retrieve.py --quick                          # the first 500 documents only

--model is anything `pyterrier_tite.load` takes that encodes texts: 'minilm' (a BertBiEncoder), a TITE hub id or a
folder saved by `pyterrier-tite train-biencoder`. With --quick the index holds only part of the collection, so its
row is far below BM25's (which searches all of it): a smoke run, not a measurement.
"""

import argparse
import itertools
import os
import tempfile

import pyterrier as pt
import pyterrier_dr
from pyterrier.measures import R, nDCG

import pyterrier_tite as t

parser = argparse.ArgumentParser(description="bi-encoder >> FlexIndex: index, retrieve, evaluate")
parser.add_argument("--model", default="minilm", help="'minilm', a TITE / BertBiEncoder hub id or folder")
parser.add_argument("--dataset", default="vaswani", help="ir_datasets id or alias (documents with a text field)")
parser.add_argument("--index", default=None, help="index folder to write (default: a temporary one)")
parser.add_argument("--quick", action="store_true", help="500 documents and 10 queries")
args = parser.parse_args()

dataset = t.datasets.get_dataset(args.dataset)
topics, qrels = dataset.get_topics(), dataset.get_qrels()
documents = dataset.get_corpus_iter(verbose=False)
if args.quick:
    documents, topics = itertools.islice(documents, 500), topics.head(10)

model = t.load(args.model)  # 'minilm' -> BertBiEncoder, a TITE checkpoint -> TITE
with tempfile.TemporaryDirectory() as scratch:
    index = pyterrier_dr.FlexIndex(args.index or os.path.join(scratch, "index.flex"), verbose=False)
    (model >> index).index(documents)  # encodes every document once
    dense = model.query_encoder() >> index.np_retriever(num_results=100)
    print(dense.search("measurement of plasma temperature").head(3)[["docno", "score"]])
    table = pt.Experiment(
        [t.bm25(args.dataset), dense], topics, qrels, eval_metrics=[nDCG @ 10, R @ 100, "mrt"],
        names=["BM25", f"{args.model} >> FlexIndex"], round=4,
    )  # fmt: skip
print(table.to_string(index=False))
