"""``pyterrier-tite index | retrieve | rerank`` end to end, as a user types them, on small files made here (integer
ids, unicode, an empty text, duplicate pairs) and on vaswani; plus the all-or-nothing build underneath."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _cli import cli_here

TITE = "webis/tite-2-late-msmarco"
SPARSE_CE = "webis/sparse-cross-encoder-4-4096"
SPLADE = "naver/splade-cocondenser-ensembledistil"

DOCS = [
    {"docno": 1, "text": "the cat sat on the mat"},
    {"docno": "d2", "text": "Ünïcødé straße café crème brûlée"},
    {"docno": 3, "text": ""},
    {"docno": "d4", "text": "dogs chase cats in the park"},
    {"docno": 5, "text": "quantum physics of cats and dogs"},
    {"docno": "d6", "text": "a mat for the kitchen"},
]
TOPICS = "1\tcat on a mat\n2\tcafé straße\n3\tdogs in a park\n"
QRELS = "1 0 1 1\n1 0 d6 1\n2 0 d2 2\n3 0 d4 1\n"


def cli(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pyterrier_tite", *args], capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, cwd=cwd,
    )  # fmt: skip


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def write_corpus(path: Path, docs=DOCS) -> Path:
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    return path


def run_lines(path: Path) -> list[list[str]]:
    import gzip

    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.split() for line in f]


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}."))


@pytest.fixture
def files(tmp_path):
    write_corpus(tmp_path / "corpus.jsonl")
    (tmp_path / "topics.tsv").write_text(TOPICS, encoding="utf-8")
    (tmp_path / "qrels.txt").write_text(QRELS, encoding="utf-8")
    return tmp_path


def test_dense_index_retrieve_evaluate(files):
    """A TITE FlexIndex holds every docno in corpus order (integer ids as str, the empty text too) with the model's
    own vectors; retrieve needs no --model (the index names it) and its run evaluates."""
    index, run = files / "tite.index", files / "tite.run"
    ok(cli("index", "--model", TITE, "--dataset", str(files / "corpus.jsonl"), "--index", str(index),
           "--batch-size", "4", "--device", "cpu", "--threads", "1"))  # fmt: skip
    info = json.loads((index / "pyterrier_tite_index.json").read_text())
    assert info["kind"] == "dense" and info["model"] == TITE and info["documents"] == len(DOCS)
    assert siblings(index) == []

    import pyterrier_dr

    import pyterrier_tite as t

    flex = pyterrier_dr.FlexIndex(str(index))
    docnos, vectors, meta = flex.payload()
    assert list(docnos) == [str(d["docno"]) for d in DOCS] and meta["doc_count"] == len(DOCS)
    model = t.load(TITE, device="cpu")
    expected = model.encode_docs([d["text"] for d in DOCS])
    from _tolerance import assert_float_close

    assert_float_close(np.array(vectors), expected)

    done = ok(cli("retrieve", "--index", str(index), "--topics", str(files / "topics.tsv"), "--output", str(run),
                  "-k", "4", "--quiet"))  # fmt: skip
    assert "12 results for 3 of 3 queries" in done.stdout
    lines = run_lines(run)
    assert all(len(line) == 6 and line[1] == "Q0" for line in lines)
    for qid in "123":
        rows = [line for line in lines if line[0] == qid]
        assert [int(r[3]) for r in rows] == [1, 2, 3, 4]
        scores = [float(r[4]) for r in rows]
        assert scores == sorted(scores, reverse=True)
    # the run ranks what the model scores: query 1's top document by the model's own dot products
    query_vec = model.encode_queries(["cat on a mat"])[0]
    assert lines[0][2] == str(DOCS[int(np.argmax(expected @ query_vec))]["docno"])

    done = ok(cli("evaluate", str(run), "--qrels", str(files / "qrels.txt"), "--measures", "nDCG@10 R@4"))
    assert "tite.run" in done.stdout


def test_existing_index_and_run_are_refused_unless_overwrite(files):
    index, run = files / "bm25.index", files / "bm25.run"
    ok(cli("index", "--model", "bm25", "--dataset", str(files / "corpus.jsonl"), "--index", str(index)))
    assert json.loads((index / "pyterrier_tite_index.json").read_text())["kind"] == "bm25"
    done = cli("index", "--model", "bm25", "--dataset", str(files / "corpus.jsonl"), "--index", str(index))
    assert done.returncode == 2 and "already exists" in done.stderr and "--overwrite" in done.stderr
    assert "Traceback" not in done.stderr

    write_corpus(files / "more.jsonl", [*DOCS, {"docno": "d7", "text": "one more cat"}])
    ok(cli("index", "--model", "bm25", "--dataset", str(files / "more.jsonl"), "--index", str(index), "--overwrite"))
    assert json.loads((index / "pyterrier_tite_index.json").read_text())["documents"] == len(DOCS) + 1
    assert siblings(index) == []

    ok(cli("retrieve", "--index", str(index), "--topics", str(files / "topics.tsv"), "--output", str(run), "-k", "3"))
    assert {line[0] for line in run_lines(run)} == {"1", "2", "3"}
    done = cli_here("retrieve", "--index", str(index), "--topics", str(files / "topics.tsv"), "--output", str(run))
    assert done.returncode == 2 and "already exists" in done.stderr
    done = cli_here("retrieve", "--index", str(index), "--topics", str(files / "topics.tsv"), "--output", str(run),
               "--model", TITE, "--overwrite")  # fmt: skip
    assert done.returncode == 2 and "BM25 index" in done.stderr


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"docno": "d2", "text": "again"}, "duplicate docno 'd2'"),
        ({"docno": "d9", "text": None}, "missing text (None/NaN) for docno 'd9'"),
        ({"docno": "two words", "text": "x"}, "whitespace"),
    ],
)
def test_bad_corpus_is_named_and_leaves_no_index(files, bad, message):
    write_corpus(files / "bad.jsonl", [*DOCS, bad])
    index = files / "bad.index"
    done = cli_here("index", "--model", TITE, "--dataset", str(files / "bad.jsonl"), "--index", str(index), "--quiet")
    assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not index.exists() and siblings(index) == []


def test_bad_arguments_are_named(files):
    corpus = str(files / "corpus.jsonl")
    done = cli_here("index", "--model", "no-such/model-anywhere", "--dataset", corpus, "--index", str(files / "x"))
    assert done.returncode == 2 and "no-such/model-anywhere" in done.stderr and not (files / "x").exists()
    done = cli_here("index", "--model", "bm25", "--dataset", str(files / "missing.jsonl"), "--index", str(files / "x"))
    assert done.returncode == 2 and "missing.jsonl does not exist" in done.stderr
    done = cli_here("index", "--model", "bm25", "--dataset", "no-such-collection", "--index", str(files / "x"))
    assert done.returncode == 2 and "neither a file nor a known ir_datasets id" in done.stderr
    (files / "empty.jsonl").write_text("\n")
    done = cli_here("index", "--model", TITE, "--dataset", str(files / "empty.jsonl"), "--index", str(files / "x"))
    assert done.returncode == 2 and "the corpus is empty" in done.stderr and not (files / "x").exists()
    done = cli_here("index", "--model", SPARSE_CE, "--dataset", corpus, "--index", str(files / "x"))
    assert done.returncode == 2 and "re-ranker" in done.stderr and not (files / "x").exists()
    done = cli_here("retrieve", "--index", str(files / "nothing"), "--topics", str(files / "topics.tsv"),
                    "--output", "r")  # fmt: skip
    assert done.returncode == 2 and "does not exist" in done.stderr


def test_interrupted_builds_leave_nothing_and_keep_the_old_index(tmp_path):
    """Ctrl-C in the middle of encoding removes the partial build; with --overwrite the complete old index stays;
    leftovers of a killed build (its process gone) are cleared by the next build."""
    import pyterrier_dr

    import pyterrier_tite as t
    from pyterrier_tite.cli.service import build_index

    model = t.load(TITE, device="cpu", batch_size=2)

    def interrupted(after: int):
        for number, doc in enumerate(DOCS):
            if number == after:
                raise KeyboardInterrupt
            yield doc

    index = tmp_path / "idx"
    with pytest.raises(KeyboardInterrupt):
        build_index(TITE, interrupted(3), index, model=model, batch_size=1, verbose=False)
    assert not index.exists() and siblings(index) == []

    build_index(TITE, iter(DOCS), index, model=model, verbose=False)
    with pytest.raises(KeyboardInterrupt):
        build_index(TITE, interrupted(4), index, model=model, batch_size=1, overwrite=True, verbose=False)
    assert list(pyterrier_dr.FlexIndex(str(index)).docnos()) == [str(d["docno"]) for d in DOCS]
    assert siblings(index) == []

    stale = tmp_path / ".idx2.building-999999999"
    stale.mkdir()
    (stale / "vecs.f4").write_bytes(b"partial")
    build_index("bm25", iter(DOCS), tmp_path / "idx2", verbose=False)
    assert not stale.exists() and (tmp_path / "idx2" / "pt_meta.json").is_file()


@pytest.mark.slow  # index + retrieve through the CLI end to end (12 s); the pieces have fast tests of their own
def test_splade_index_and_retrieve(files):
    index, run = files / "splade.index", files / "splade.run.gz"
    ok(cli("index", "--model", SPLADE, "--dataset", str(files / "corpus.jsonl"), "--index", str(index), "--quiet"))
    assert json.loads((index / "pyterrier_tite_index.json").read_text())["kind"] == "splade"
    ok(cli("retrieve", "--index", str(index), "--topics", str(files / "topics.tsv"), "--output", str(run), "-k", "2"))
    lines = run_lines(run)
    assert {line[0] for line in lines} == {"1", "2", "3"} and all(len(line) == 6 for line in lines)


def test_rerank_a_run_with_duplicates_from_a_corpus_file(files):
    """The top k of each query of a run (duplicate lines counted once) re-scored by the model, texts from a corpus
    file; the scores are the model's own."""
    (files / "in.run").write_text(
        "1 Q0 1 1 9.0 x\n1 Q0 d6 2 8.0 x\n1 Q0 1 3 7.0 x\n1 Q0 3 4 6.0 x\n1 Q0 d4 5 5.0 x\n"
        "2 Q0 d2 1 9.0 x\n2 Q0 3 2 8.0 x\n3 Q0 d4 1 9.0 x\n3 Q0 5 2 8.0 x\n3 Q0 d4 3 7.0 x\n3 Q0 1 4 1.0 x\n",
        encoding="utf-8",
    )
    out = files / "reranked.run.gz"
    done = ok(cli("rerank", "--model", SPARSE_CE, "--topics", str(files / "topics.tsv"), "--run",
                  str(files / "in.run"), "--dataset", str(files / "corpus.jsonl"), "--output", str(out), "-k", "3",
                  "--batch-size", "2", "--device", "cpu"))  # fmt: skip
    lines = run_lines(out)
    pairs = {(line[0], line[2]) for line in lines}
    assert len(pairs) == len(lines)  # each pair once
    assert pairs == {("1", "1"), ("1", "d6"), ("1", "3"), ("2", "d2"), ("2", "3"), ("3", "d4"), ("3", "5"), ("3", "1")}
    assert "8 re-ranked results for 3 queries" in done.stdout

    import pandas as pd

    import pyterrier_tite as t

    texts = {str(d["docno"]): d["text"] for d in DOCS}
    queries = dict(line.split("\t") for line in TOPICS.strip().split("\n"))
    frame = pd.DataFrame([{"qid": q, "query": queries[q], "docno": d, "text": texts[d]} for q, d in sorted(pairs)])
    expected = t.load(SPARSE_CE, device="cpu").transform(frame)
    got = {(line[0], line[2]): float(line[4]) for line in lines}
    for row in expected.itertuples():
        assert got[(row.qid, row.docno)] == pytest.approx(row.score, abs=1e-4)
    for qid in "123":
        ranks = [int(line[3]) for line in lines if line[0] == qid]
        assert ranks == list(range(1, len(ranks) + 1))


def test_rerank_names_missing_texts_and_queries(files):
    (files / "in.run").write_text("1 Q0 1 1 9.0 x\n1 Q0 d99 2 8.0 x\n2 Q0 d2 1 9.0 x\n", encoding="utf-8")
    common = ["--model", SPARSE_CE, "--topics", str(files / "topics.tsv"), "--run", str(files / "in.run")]
    done = cli_here("rerank", *common, "--dataset", str(files / "corpus.jsonl"), "--output", str(files / "o.run"))
    assert done.returncode == 2 and "1 of 3 docnos of the run" in done.stderr and "(e.g. 'd99')" in done.stderr
    assert not (files / "o.run").exists()
    (files / "in.run").write_text("7 Q0 1 1 9.0 x\n", encoding="utf-8")
    done = cli_here("rerank", *common, "--dataset", str(files / "corpus.jsonl"), "--output", str(files / "o.run"))
    assert done.returncode == 2 and "qid '7'" in done.stderr
    done = cli_here("rerank", *common, "--output", str(files / "o.run"))
    assert done.returncode == 2 and "--dataset" in done.stderr


@pytest.mark.slow
def test_vaswani_bm25_chain_and_rerank(tmp_path, irds_home, tite_cache):
    """index -> retrieve -> evaluate on vaswani reproduces the README's BM25 nDCG@10; rerank --first-stage bm25
    re-scores the BM25 top 5 of a few queries with texts from the collection."""
    index, run = tmp_path / "vaswani.bm25", tmp_path / "bm25.run.gz"
    ok(cli("index", "--model", "bm25", "--dataset", "vaswani", "--index", str(index), "--quiet"))
    ok(cli("retrieve", "--index", str(index), "--topics", "vaswani", "--output", str(run), "--quiet"))
    ok(cli("evaluate", str(run), "--qrels", "vaswani", "--csv", str(tmp_path / "t.csv")))
    assert "0.4667" in (tmp_path / "t.csv").read_text()

    import pyterrier_tite as t

    topics = t.datasets.get_dataset("vaswani").get_topics().head(3)
    lines = [f"{q}\t{text}\n" for q, text in zip(topics["qid"], topics["query"], strict=True)]
    (tmp_path / "few.tsv").write_text("".join(lines))
    out = tmp_path / "minilm.run"
    ok(cli("rerank", "--model", "minilm", "--topics", str(tmp_path / "few.tsv"), "--first-stage", "bm25",
           "--dataset", "vaswani", "--output", str(out), "-k", "5", "--quiet"))  # fmt: skip
    lines = run_lines(out)
    assert len(lines) == 15 and {line[0] for line in lines} == set(topics["qid"])
    # topics by ir_datasets id: their collection gives the texts, no --dataset needed
    by_id = tmp_path / "by-id.run"
    ok(cli("rerank", "--model", SPARSE_CE, "--topics", "vaswani", "--run", str(run), "--output", str(by_id), "-k", "2",
           "--quiet"))  # fmt: skip
    assert len(run_lines(by_id)) == 2 * 93
