"""Which offline ranker should teach the cross-encoders (``python -m experiments.teacher_selection``): every ranker
available without training, and their fusions, re-ranking BM25 on TREC DL
(:mod:`~experiments.teacher_selection.selection`; the chosen fusion became
:class:`~experiments.common.offline_teacher.OfflineTeacher`)."""
