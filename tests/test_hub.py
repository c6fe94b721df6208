"""Released checkpoints load exactly by their hub ids: for every repo under ``../shared/hub/expected`` (more get
added), ``from_pretrained('<hub id>')`` through the offline hub cache reproduces the outputs its reference code
computed. Select with ``-k hub``; the test id carries the repo id.

The family is read from the expected outputs (what the reference computed), never from the repo name, so a new repo
of a known family is checked without a code change and one of an unknown family fails instead of being skipped."""

from __future__ import annotations

import pytest
from _hub import expected, hub_repos, require_fixtures

pytestmark = pytest.mark.usefixtures("single_thread")


def _check_for(inputs: dict, outputs: dict):
    if "query_term_weights" in outputs:
        from _hub_splade import check
    elif "query_vectors" in outputs:
        from _hub_aggretriever import check
    elif "logits_target" in outputs:
        from _hub_sparse_ce import check
    elif "query_embeddings" in outputs:
        from _hub_tite import check_biencoder as check
    elif "last_hidden_state" in outputs:
        from _hub_tite import check_encoder as check
    else:
        pytest.fail(f"no hub check for a fixture with outputs {sorted(outputs)}")
    return check


@pytest.mark.parametrize("repo", hub_repos() or ["(no fixtures)"], ids=lambda r: f"hub:{r}")
def test_hub_checkpoint_reproduces_reference(repo: str) -> None:
    require_fixtures()
    inputs, outputs = expected(repo)
    _check_for(inputs, outputs)(repo, inputs, outputs)
