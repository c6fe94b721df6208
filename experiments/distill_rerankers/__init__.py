"""Cross-encoders taught by an offline teacher (``python -m experiments.distill_rerankers``): MonoCE, SparseCE with
any window and query pattern, and CELI, trained with the same data, steps and seeds and compared re-ranking BM25.

- :mod:`~experiments.distill_rerankers.recipe`: the study's command (train every variant x seed, one table);
- :mod:`~experiments.distill_rerankers.data`: its training queries, BM25 candidates and the teacher's labels;
- :mod:`~experiments.distill_rerankers.gpu`: the same recipe split for a GPU machine without the data
  (``python -m experiments.distill_rerankers.gpu bundle|train|evaluate|unpack``), with
  :mod:`~experiments.distill_rerankers.carry` (the bundle it carries there and the models that come back);
- :mod:`~experiments.distill_rerankers.doc_lengths`: the collections' document lengths in tokens (what a batch pads
  to).

Importing this package imports nothing heavy: the GPU side runs it with torch alone.
"""
