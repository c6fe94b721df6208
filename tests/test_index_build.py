"""Index builds are all or nothing and damaged indexes raise a Python error: a failing corpus, bad ids, missing text
or truncated files never leave an index that later loads as complete, and never kill the process."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from pyterrier_tite.store.atomic import atomic_build
from pyterrier_tite.store.pisa_build import build_pisa_index
from pyterrier_tite.store.pisa_files import CorruptIndexError, check_pisa_index

WORDS = "red blue hot cold dense".split()
DOCS = [{"docno": f"d{i}", "text": f"plasma physics of {w} stars"} for i, w in enumerate(WORDS)]


def bm25_docnos(path, query="plasma hot"):
    from pyterrier_pisa import PisaIndex

    check_pisa_index(path)
    return PisaIndex(str(path)).bm25().search(query)["docno"].tolist()


def failing_corpus(after: int):
    for i, doc in enumerate(DOCS):
        if i == after:
            raise RuntimeError("corpus broke")
        yield doc


def test_a_complete_build_retrieves(tmp_path):
    build_pisa_index(iter(DOCS), str(tmp_path / "idx"), ["text"])
    assert bm25_docnos(tmp_path / "idx")[0] == "d2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no staging folder left


def test_a_corpus_error_reaches_the_caller_and_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="corpus broke"):
        build_pisa_index(failing_corpus(after=3), str(tmp_path / "idx"), ["text"])
    assert list(tmp_path.iterdir()) == []
    build_pisa_index(iter(DOCS), str(tmp_path / "idx"), ["text"])  # a rerun starts cleanly
    assert len(bm25_docnos(tmp_path / "idx", "plasma")) == 5


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"docno": "d\n9", "text": "x"}, "whitespace"),
        ({"docno": "d 9", "text": "x"}, "whitespace"),
        ({"docno": None, "text": "x"}, "missing docno"),
        ({"docno": "d1", "text": "x"}, "duplicate docno 'd1'"),
        ({"docno": "d9", "text": None}, "missing text .* 'd9'"),
        ({"docno": "d9", "text": math.nan}, "missing text .* 'd9'"),
        ({"docno": "d9", "body": "x"}, "lacks fields"),
    ],
)
def test_bad_documents_are_refused_by_name(tmp_path, bad, message):
    with pytest.raises((ValueError, KeyError), match=message):
        build_pisa_index(iter([*DOCS, bad]), str(tmp_path / "idx"), ["text"])
    assert not (tmp_path / "idx").exists()


def test_integer_docnos_become_strings(tmp_path):
    build_pisa_index(({**d, "docno": i} for i, d in enumerate(DOCS)), str(tmp_path / "idx"), ["text"])
    assert bm25_docnos(tmp_path / "idx")[0] == "2"


def test_empty_and_single_document_corpora(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        build_pisa_index(iter([]), str(tmp_path / "empty"), ["text"])
    assert not (tmp_path / "empty").exists()
    build_pisa_index(iter(DOCS[:1]), str(tmp_path / "one"), ["text"])
    assert bm25_docnos(tmp_path / "one", "plasma") == ["d0"]


def test_an_existing_index_is_never_overwritten(tmp_path):
    (tmp_path / "idx").mkdir()
    with pytest.raises(FileExistsError), atomic_build(tmp_path / "idx"):
        pass


@pytest.mark.parametrize(
    ("damage", "file"),
    [
        (lambda p: (p / "fwd.doclex").unlink(), "fwd.doclex"),
        (lambda p: (p / "pt_meta.json").unlink(), "pt_meta.json"),
        (lambda p: (p / "inv.freqs").write_bytes((p / "inv.freqs").read_bytes()[:-12]), "inv.freqs"),
        (lambda p: (p / "inv.sizes").write_bytes((p / "inv.sizes").read_bytes()[:-4]), "inv.sizes"),
        (lambda p: (p / "fwd.documents").write_text("d0\n"), "fwd.documents"),
    ],
)
def test_damaged_indexes_raise_naming_the_file(tmp_path, damage, file):
    build_pisa_index(iter(DOCS), str(tmp_path / "idx"), ["text"])
    damage(tmp_path / "idx")
    with pytest.raises(CorruptIndexError, match=file):
        check_pisa_index(tmp_path / "idx")


def test_a_damaged_cached_index_is_an_error_not_a_dead_process(tmp_path):
    """Through the public entry point, in a subprocess: PISA alone aborts the interpreter on this damage."""
    build_pisa_index(iter(DOCS), str(tmp_path / "idx"), ["text"])
    (tmp_path / "idx" / "fwd.doclex").unlink()
    code = (
        "import pyterrier_tite as t\n"
        f"try:\n    t.pisa_index('vaswani', path={str(tmp_path / 'idx')!r})\n"
        "except OSError as e:\n    print('raised:', e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "raised:" in done.stdout and "fwd.doclex" in done.stdout


def test_a_concurrent_first_retriever_waits_instead_of_removing_half_written_files(tmp_path):
    """PISA writes its compressed index beside the index when a retriever first opens it; a second process opening
    the same index meanwhile must not remove (or rewrite) that half-written file, but wait and then reuse it."""
    import threading

    from pyterrier_tite.store.pisa_derived import pisa_derived_files

    path = tmp_path / "index"
    build_pisa_index(DOCS, str(path), ["text"])
    derived = path / "bm25.q0.bmw.64"  # named like PISA's block-max file
    inside, release, seen = threading.Event(), threading.Event(), []

    def first() -> None:
        with pisa_derived_files(path):
            derived.write_bytes(b"half")
            inside.set()
            release.wait(10)
            derived.write_bytes(b"half and the rest")

    def second() -> None:
        with pisa_derived_files(path):
            seen.append(derived.read_bytes() if derived.exists() else None)

    writer = threading.Thread(target=first)
    writer.start()
    assert inside.wait(10)
    reader = threading.Thread(target=second)
    reader.start()
    reader.join(0.5)
    assert seen == []  # still waiting for the first block
    release.set()
    writer.join(10)
    reader.join(10)
    assert seen == [b"half and the rest"]
