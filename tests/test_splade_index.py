"""SPLADE never silently wrong: missing queries / texts are refused by id in every transformer, index builds are all or
nothing (a failing corpus, a bad document or an encoder error leaves no index that later loads as complete), and a
damaged index raises ``CorruptIndexError`` naming the file before PISA can abort the process."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest
from pyterrier_pisa import PisaIndex
from test_splade import TEXTS, tiny_model

from pyterrier_tite.store.pisa_files import CorruptIndexError

pytestmark = pytest.mark.usefixtures("single_thread")

DOCS = [{"docno": f"d{i}", "text": t} for i, t in enumerate(TEXTS[:8])]


@pytest.fixture(scope="module")
def tiny():
    return tiny_model()


def failing(docs, after: int):
    for i, doc in enumerate(docs):
        if i == after:
            raise RuntimeError("corpus broke")
        yield doc


def build(model, path, docs=DOCS, **kwargs):
    return model.indexer(str(path), verbose=False, **kwargs).index(iter(docs))


# -- missing text ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("missing", [None, math.nan])
def test_missing_query_or_text_is_named_by_id(tiny, missing):
    queries = pd.DataFrame({"qid": ["q1", "q2"], "query": ["plasma", missing]})
    with pytest.raises(ValueError, match="missing query .*'q2'"):
        tiny.query_encoder()(queries)
    docs = pd.DataFrame({"docno": ["d1", "d2"], "text": [missing, "plasma"]})
    with pytest.raises(ValueError, match="missing text .*'d1'"):
        tiny.doc_encoder()(docs)
    with pytest.raises(ValueError, match="missing text .*'d1'"):
        list(tiny.doc_encoder().transform_iter(docs.to_dict("records")))
    results = queries.assign(docno=["d1", "d2"], text=["a", "b"])
    with pytest.raises(ValueError, match="missing query .*'q2'"):
        tiny.scorer()(results)


def test_integer_ids_and_nul_bytes(tiny, tmp_path):
    index = build(tiny, tmp_path / "idx", [{**d, "docno": i} for i, d in enumerate(DOCS)])
    assert index.num_docs() == len(DOCS)
    run = tiny.retriever(index)(pd.DataFrame({"qid": [7], "query": ["plasma\0flow"]}))
    assert len(run) and set(run["docno"]) <= {str(i) for i in range(8)}  # docnos as str
    clean = tiny.query_encoder()(pd.DataFrame({"qid": ["1"], "query": ["plasma flow"]}))["query_toks"][0]
    nul = tiny.query_encoder()(pd.DataFrame({"qid": ["1"], "query": ["plasma\0flow"]}))["query_toks"][0]
    assert nul == clean  # NUL is a space, as in every engine-facing text


# -- all-or-nothing builds -------------------------------------------------------------------------------------------
def test_a_failing_corpus_leaves_no_index(tiny, tmp_path):
    with pytest.raises(RuntimeError, match="corpus broke"):
        build(tiny, tmp_path / "idx", failing(DOCS, after=5))
    assert list(tmp_path.iterdir()) == []  # neither the index nor its staging folder
    assert build(tiny, tmp_path / "idx").num_docs() == len(DOCS)  # a rerun starts cleanly


def test_an_encoder_error_leaves_no_index(tiny, tmp_path, monkeypatch):
    calls = []

    def broken(texts, max_length, role=None):
        calls.append(len(texts))
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(tiny, "_encode_on_device", broken)  # what the indexer calls per batch
    with pytest.raises(RuntimeError, match="out of memory"):
        build(tiny, tmp_path / "idx")
    assert calls and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"docno": "d\n9", "text": "x"}, "whitespace"),
        ({"docno": "d 9", "text": "x"}, "whitespace"),
        ({"docno": "d1", "text": "x"}, "duplicate docno 'd1'"),
        ({"docno": "d9", "text": None}, "missing text .*'d9'"),
        ({"docno": "d9", "text": math.nan}, "missing text .*'d9'"),
        ({"docno": "d9", "body": "x"}, "lacks fields"),
    ],
)
def test_bad_documents_are_refused_and_leave_no_index(tiny, tmp_path, bad, message):
    with pytest.raises((ValueError, KeyError), match=message):
        build(tiny, tmp_path / "idx", [*DOCS, bad])
    assert list(tmp_path.iterdir()) == []


def test_empty_corpus_and_existing_index(tiny, tmp_path):
    with pytest.raises(ValueError, match="empty"):
        build(tiny, tmp_path / "idx", [])
    assert not (tmp_path / "idx").exists()
    assert build(tiny, tmp_path / "idx", DOCS[:1]).num_docs() == 1  # a single document is an index
    with pytest.raises(FileExistsError):
        build(tiny, tmp_path / "idx")
    with pytest.raises(RuntimeError, match="corpus broke"):  # overwrite keeps the old index until the new is complete
        build(tiny, tmp_path / "idx", failing(DOCS, after=3), overwrite=True)
    assert PisaIndex(str(tmp_path / "idx")).num_docs() == 1
    assert build(tiny, tmp_path / "idx", overwrite=True).num_docs() == len(DOCS)


def test_indexing_shows_a_progress_bar_unless_quiet(tiny, tmp_path, capsys):
    tiny.indexer(str(tmp_path / "loud")).index(iter(DOCS))
    assert "SPLADE indexing" in capsys.readouterr().err
    tiny.indexer(str(tmp_path / "quiet"), verbose=False).index(iter(DOCS))
    assert "SPLADE indexing" not in capsys.readouterr().err


# -- damaged indexes -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("damage", "file"),
    [
        (lambda p: (p / "fwd.doclex").unlink(), "fwd.doclex"),
        (lambda p: (p / "pt_meta.json").unlink(), "pt_meta.json"),
        (lambda p: (p / "inv.freqs").write_bytes((p / "inv.freqs").read_bytes()[:-12]), "inv.freqs"),
    ],
)
def test_a_damaged_index_raises_naming_the_file(tiny, tmp_path, damage, file):
    build(tiny, tmp_path / "idx")
    damage(tmp_path / "idx")
    with pytest.raises(CorruptIndexError, match=file):
        tiny.retriever(str(tmp_path / "idx"))


def test_a_damaged_index_is_an_error_not_a_dead_process(tiny, tmp_path):
    """In a subprocess: PISA alone aborts the interpreter (signal 6, no message) on a missing fwd.doclex."""
    tiny.save_pretrained(str(tmp_path / "model"))
    build(tiny, tmp_path / "idx")
    (tmp_path / "idx" / "fwd.doclex").unlink()
    code = (
        "import pyterrier_tite as t\n"
        f"model = t.Splade.from_pretrained({str(tmp_path / 'model')!r}, device='cpu')\n"
        f"try:\n    model.retriever({str(tmp_path / 'idx')!r})\n"
        "except OSError as e:\n    print('raised:', e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "raised:" in done.stdout and "fwd.doclex" in done.stdout


def test_an_index_built_in_python_opens_with_t_load_and_else_advises_its_kind(tiny, tmp_path):
    """``splade.indexer(path)`` records its model, so ``t.load(path)`` is its retriever; a PISA index without the
    record is refused with advice for SPLADE (``.retriever``), not a FlexIndex's."""
    import pyterrier_tite as t

    path = str(tmp_path / "idx")
    build(tiny, path)
    queries = pd.DataFrame({"qid": ["1"], "query": ["plasma flow"]})
    pd.testing.assert_frame_equal(t.load(path)(queries), tiny.retriever(path)(queries))
    (tmp_path / "idx" / "pyterrier_tite_index.json").unlink()
    with pytest.raises(ValueError, match=r"does not record the model.*t\.load\(model\)\.retriever\(") as raised:
        t.load(path)
    assert "FlexIndex" not in str(raised.value)
