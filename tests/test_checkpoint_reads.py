"""Every family load opens a checkpoint's settings once: the ``Checkpoint`` that ``open_checkpoint`` reads
(``config.json``, ``tokenizer_config.json``, the safetensors header) travels down to the tokenizer and weight loaders,
so none of them opens those files again. Counted are the opens made by this package's code (Python's ``open`` audit
event, attributed to the nearest frame that is ours or a library's) and its calls of ``safetensors.safe_open``;
transformers' and tokenizers' own reads are listed in the failure message but not limited here. Reading the weights
themselves (``load_file``, ``torch.load``) is not a header read."""

from __future__ import annotations

import os
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from _hub import require_fixtures
from _tiny import bert_config, word_tokenizer

import pyterrier_tite

pytestmark = pytest.mark.usefixtures("single_thread")

PACKAGE = os.path.dirname(os.path.abspath(pyterrier_tite.__file__)) + os.sep
SETTINGS = ("config.json", "tokenizer_config.json")
_counting: list[tuple[Counter, Counter]] = []  # (ours, theirs) of the block in progress; the hook stays installed


def _ours(depth: int) -> bool | None:
    """Whether the nearest caller outside the standard library is this package (None: no library either)."""
    frame = sys._getframe(depth)
    while frame is not None:
        file = frame.f_code.co_filename
        if file.startswith(PACKAGE):
            return True
        if "site-packages" in file or "dist-packages" in file:
            return False
        frame = frame.f_back
    return None


def _record(kind: str, path: str, depth: int) -> None:
    ours, theirs = _counting[-1]
    (ours if _ours(depth) else theirs)[(kind, os.path.abspath(path))] += 1


def _hook(event: str, args: tuple) -> None:
    if _counting and event == "open" and args and isinstance(args[0], (str, bytes)):
        path = os.fsdecode(args[0])
        name = os.path.basename(path)
        if name in SETTINGS or name.endswith(".safetensors"):
            _record("safetensors header" if name.endswith(".safetensors") else name, path, 3)


sys.addaudithook(_hook)


def count_reads(monkeypatch, load: Callable[[], object]) -> tuple[Counter, Counter]:
    """``(ours, theirs)``: opens of each (kind, file) while ``load()`` runs."""
    import safetensors

    safe_open = safetensors.safe_open

    def counted(file, *args, **kwargs):
        _record("safetensors header", os.fspath(file), 2)
        return safe_open(file, *args, **kwargs)

    monkeypatch.setattr(safetensors, "safe_open", counted)
    _counting.append((Counter(), Counter()))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # fresh-head warnings of the new-head starts
            load()
    finally:
        ours, theirs = _counting.pop()
    return ours, theirs


# ------------------------------------------------------------------------------------------------ the loads
def _bert_folder(path: Path) -> str:
    from transformers import BertModel

    BertModel(bert_config()).save_pretrained(path)
    word_tokenizer().save_pretrained(path)
    return str(path)


def _reranker_folder(path: Path, head: str) -> str:
    from transformers import BertForSequenceClassification

    from pyterrier_tite.models.cross_encoder.convert import save_scorer
    from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer

    backbone = BertForSequenceClassification(bert_config(num_labels=1))
    scorer = CrossEncoderScorer(backbone, head, token_dim=8)
    save_scorer(scorer, word_tokenizer(), path, reranker="CELI" if head == "celi" else "MonoCE")
    return str(path)


#: case -> (family loader module, what it is given: a hub id, a folder builder, or keyword arguments)
LOADS = {
    "tite-lightning-ir": ("tite", "webis/tite-2-late-msmarco"),
    "tite-pretraining": ("tite", "webis/tite-2-late"),
    "aggretriever": ("aggretriever", "castorini/aggretriever-cocondenser"),
    "splade": ("splade", "naver/splade-cocondenser-ensembledistil"),
    "splade-pair": ("splade", {"query": "naver/efficient-splade-V-large-query",
                               "doc": "naver/efficient-splade-V-large-doc"}),  # fmt: skip
    "sparse-ce": ("sparse_ce", "webis/sparse-cross-encoder-4-4096"),
    "sparse-ce-reranker": ("cross_encoder", "webis/sparse-cross-encoder-4-4096"),
    "bert-biencoder": ("bert_biencoder", _bert_folder),
    "monoce": ("cross_encoder", lambda path: _reranker_folder(path, "cls")),
    "celi": ("cross_encoder", lambda path: _reranker_folder(path, "celi")),
}


@pytest.mark.parametrize("case", sorted(LOADS))
def test_family_load_reads_each_settings_file_at_most_once(case, tmp_path, monkeypatch) -> None:
    from importlib import import_module

    family, given = LOADS[case]
    if callable(given):
        given = given(tmp_path)
    else:
        require_fixtures()
    load = import_module(f"pyterrier_tite.models.{family}.load").load
    run = (lambda: load(**given)) if isinstance(given, dict) else (lambda: load(given))
    run()  # once uncounted: first imports stay out of the count
    ours, theirs = count_reads(monkeypatch, run)
    twice = {f"{kind} {path}": n for (kind, path), n in ours.items() if n > 1}
    read = {kind for kind, _ in ours}
    assert "config.json" in read, f"the probe saw no read of config.json: {dict(ours)}"  # the count works
    assert not twice, f"{case}: read more than once by our code: {twice}; transformers' own reads: {dict(theirs)}"
