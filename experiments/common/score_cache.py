"""Re-ranker scores kept on disk between evaluations, so an evaluation that is run again (another seed added, a
reference model beside a new one, one more collection) scores only what it has not scored before: on a CPU a
cross-encoder needs 10-30 minutes per model for a collection such as scifact.

Scores live in a ``pyterrier_caching.ScorerCache`` (keyed by query text and docno) at
``root/<model key>/<dataset>``: one cache per collection, since docnos repeat across collections, and a model key
(:func:`~pyterrier_tite.store.cache.model_key`) made of the folder the weights were loaded from, their files'
modification times and every setting the scores depend on (class, attention pattern, head, input caps, text column,
precision and batch size, which moves bf16 scores by padding) plus :data:`SCORING_REVISION`. A retrained checkpoint
therefore gets a new cache rather than old scores, and so does every checkpoint after a release that changed how
scores are computed; a local edit of the scoring code is not detected (delete the cache then). A model whose weights
are not a folder (built in memory, or given a tokenizer of its own) has no stable key and is scored afresh each time.

The cache hands its misses to the model grouped by query text; the model gets them back in input order, so a frame
scored through an empty cache gets exactly the scores it gets without one (a bf16 model's scores move by an ulp with
the composition of its batches, which reorders ties and moved nDCG@10 by 1e-4 on TREC DL 2020).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import pyterrier as pt

from pyterrier_tite.pt.rerankers import CrossEncoderReranker
from pyterrier_tite.store.cache import model_key, slug

# Raised by every change of this package that alters the scores a given checkpoint gets, so caches written before it
# are not read after it. 2: score heads in float32 under autocast (bf16 scores no longer tie).
SCORING_REVISION = 2


def scores_key(model: pt.Transformer) -> str | None:
    """The cache folder name of ``model``'s scores, or None when its weights have no folder to name them by."""
    if not isinstance(model, CrossEncoderReranker) or model._tokenizer_key is not None:
        return None
    source = model.scorer.source
    if not isinstance(source, str) or not os.path.isdir(source):
        return None
    settings = (type(model).__name__, *model.eq_key()[2:], model.batch_size, SCORING_REVISION)
    return model_key(type(model).__name__, os.path.realpath(source), settings)


class _InInputOrder(pt.Transformer):
    """``model`` on its input rows sorted back into their original order (the cache's frame keeps the row
    positions as its index)."""

    def __init__(self, model: pt.Transformer):
        self.model = model

    def transform_inputs(self):
        return self.model.transform_inputs()

    def transform(self, inp):
        return self.model(inp.sort_index(kind="stable"))


@contextmanager
def cached_scores(model: pt.Transformer, root: str | None, dataset: str, verbose: bool = False):
    """``model`` behind its on-disk score cache for ``dataset`` under ``root`` (``model`` itself when ``root`` is
    None or the model has no :func:`scores_key`); the cache is closed on leaving the block."""
    key = scores_key(model) if root is not None else None
    if key is None:
        yield model
        return
    from pyterrier_caching import ScorerCache

    path = os.path.join(root, key, slug(str(dataset)))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with ScorerCache(path, _InInputOrder(model), verbose=verbose) as cache:
        yield cache
