"""Aggretriever against its [CLS] vector alone (``python -m experiments.aggretriever_vs_cls``): both from one
MLM-headed start with the same data, steps and seeds, compared on dense retrieval
(:mod:`~experiments.aggretriever_vs_cls.recipe`)."""
