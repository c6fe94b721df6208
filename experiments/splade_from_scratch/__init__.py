"""SPLADE from scratch (``python -m experiments.splade_from_scratch``): a SPLADE model that has seen nothing but the
target collection (its own vocabulary, MLM + FLOPS pretraining on its text, fine-tuning on its training qrels),
compared with BM25.

- :mod:`~experiments.splade_from_scratch.recipe`: the study's command, all three stages and the table;
- :mod:`~experiments.splade_from_scratch.evaluate`: one first-stage row (BM25, SPLADE, Aggretriever or a bi-encoder;
  also cross-validated with ``--fold-models``), as the study's first runs were evaluated
  (``python -m experiments.splade_from_scratch.evaluate``).
"""
