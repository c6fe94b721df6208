"""TITE distilled from a bi-encoder's vectors (``python -m experiments.distill_tite``): pooling inserted into
all-MiniLM-L6-v2's own BERT, trained on unlabelled text to reproduce MiniLM's vectors, and compared with it.

- :mod:`~experiments.distill_tite.recipe`: the study's command (texts, teacher vectors, distillation, the tables);
- :mod:`~experiments.distill_tite.texts`: the unlabelled texts (documents, training queries, pseudo-queries);
- :mod:`~experiments.distill_tite.vector_distillation`: the loss (cosine, in-batch KL, the bank of the teacher's query
  vectors), the cached teacher vectors and the training;
- :mod:`~experiments.distill_tite.gpu`: the same recipe split for a GPU machine without the data
  (``python -m experiments.distill_tite.gpu bundle|train``);
- :mod:`~experiments.distill_tite.diagnostics`: the probes behind the study's explanations
  (``python -m experiments.distill_tite.diagnostics dense-paired|dense-sensitivity|seen-unseen|tite-start|log|...``);
  the probes themselves in :mod:`~experiments.distill_tite.start_probes` (a TITE before training) and
  :mod:`~experiments.distill_tite.ranking_probes` (a student's ranking against its teacher and other runs);
- :mod:`~experiments.distill_tite.speed`: the distilled TITE's encoding speed against its teacher, in one run
  (``python -m experiments.distill_tite.speed``);
- :mod:`~experiments.distill_tite.tite_vs_pooling`: the first comparison, TITE vs CLS- and mean-pooling bi-encoders
  fine-tuned from the same start (``python -m experiments.distill_tite.tite_vs_pooling``).

Importing this package imports nothing heavy: the GPU side runs it with torch alone.
"""
