"""The baselines every study compares with (``python -m experiments.baselines``): BM25 (PISA) on the mirrored
collections and the provided TREC DL runs (:mod:`~experiments.baselines.bm25`). The demo and the batch commands are
the product's own (``pyterrier-tite demo``, ``index`` / ``retrieve`` / ``rerank`` / ``evaluate``)."""
