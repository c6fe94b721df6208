"""``pyterrier-tite tirex rerank | retrieve`` end to end on folders in TIRA's layout made here (integer ids, unicode,
an empty text, a duplicate pair), with TIRA's environment variables, output read back with ``pt.io.read_results``."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import cli_here

SPARSE_CE = "webis/sparse-cross-encoder-4-4096"
TITE = "webis/tite-2-late-msmarco"
ROOT = Path(__file__).resolve().parents[1]

QUERIES = {1: "cat on a mat", "q2": "café straße", 3: "dogs in a park"}
DOCS = {1: "the cat sat on the mat", "d2": "Ünïcødé straße café", 3: "", "d4": "dogs chase cats in the park"}


def tirex(*args: str, env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("inputDataset", "outputDir", "TIRA_INPUT_DATASET",
                                                             "TIRA_OUTPUT_DIR")}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "pyterrier_tite", "tirex", *args], capture_output=True, text=True, timeout=600,
        env={**clean, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **env},
    )  # fmt: skip


def write_jsonl(path: Path, records: list[dict]) -> None:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


def read_back(folder: Path):
    import pyterrier as pt

    return pt.io.read_results(str(folder / "run.txt"))


def check_run(run, expected_pairs: set[tuple[str, str]]) -> None:
    """TIREx's run rules: each pair once, ranks from 1, scores descending within a query."""
    pairs = list(zip(run["qid"].astype(str), run["docno"].astype(str), strict=True))
    assert len(pairs) == len(set(pairs)) and set(pairs) == expected_pairs
    for _, rows in run.groupby("qid", sort=False):
        assert rows["rank"].tolist() == list(range(1, len(rows) + 1))
        assert rows["score"].is_monotonic_decreasing


def tira_format_check(folder: Path) -> None:
    """TIRA's own run check (when the ``tira`` package is installed)."""
    check = pytest.importorskip("tira.check_format")
    status, message = check.check_format(folder, "run.txt")
    assert status == check._fmt.OK, message


def test_rerank_with_tira_variables_reads_back(tmp_path):
    """``$inputDataset`` / ``$outputDir`` alone locate the folders; every input pair comes back once (the duplicate
    line once), scored by the model."""
    source, target = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    rows = [
        {"qid": q, "query": query, "docno": d, "text": text, "rank": rank, "score": 10.0 - rank,
         "original_query": {"query_id": str(q)}, "original_document": {"doc_id": str(d)}}
        for q, query in QUERIES.items() for rank, (d, text) in enumerate(DOCS.items(), 1)
    ]  # fmt: skip
    write_jsonl(source / "rerank.jsonl.gz", [*rows, dict(rows[1])])
    done = tirex("rerank", "--model", SPARSE_CE, "--batch-size", "3", "--device", "cpu",
                 env={"inputDataset": str(source), "outputDir": str(target)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = read_back(target)
    check_run(run, {(str(q), str(d)) for q in QUERIES for d in DOCS})
    assert (run["name"] == "pyterrier-tite.sparse-cross-encoder-4-4096").all()
    lines = (target / "run.txt").read_text(encoding="utf-8").splitlines()
    assert all(len(line.split(" ")) == 6 and line.split(" ")[1] == "Q0" for line in lines)
    metadata = (target / "ir-metadata.yml").read_text(encoding="utf-8")
    assert SPARSE_CE in metadata and "rerank" in metadata

    import pandas as pd

    import pyterrier_tite as t

    frame = pd.DataFrame([{**r, "qid": str(r["qid"]), "docno": str(r["docno"])} for r in rows])
    expected = t.load(SPARSE_CE, device="cpu").transform(frame[["qid", "query", "docno", "text"]])
    got = run.set_index(["qid", "docno"])["score"]
    for row in expected.itertuples():
        assert got[(row.qid, row.docno)] == pytest.approx(row.score, abs=1e-4)
    tira_format_check(target)


def test_rerank_keeps_the_first_k_by_input_rank(tmp_path):
    source, target = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    rows = [{"qid": q, "query": query, "docno": d, "text": text, "rank": rank, "score": 0}
            for q, query in QUERIES.items() for rank, (d, text) in enumerate(DOCS.items(), 1)]  # fmt: skip
    write_jsonl(source / "rerank.jsonl", rows)
    done = tirex("rerank", "--model", SPARSE_CE, "-k", "2", "--input", str(source), "--output-dir", str(target),
                 env={})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    check_run(read_back(target), {(str(q), str(d)) for q in QUERIES for d in (1, "d2")})


def test_retrieve_bm25_from_documents_and_queries_xml(tmp_path):
    """Full rank with BM25 (PISA, no Java): ``documents.jsonl`` + ``queries.xml`` (no queries.jsonl), located by
    ``$TIRA_INPUT_DATASET`` / ``$TIRA_OUTPUT_DIR``."""
    source, target = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    write_jsonl(source / "documents.jsonl", [{"docno": d, "text": text} for d, text in DOCS.items()])
    topics = "".join(f'<topic number="{q}"><query>{query}</query></topic>' for q, query in QUERIES.items())
    (source / "queries.xml").write_text(f"<topics>{topics}</topics>", encoding="utf-8")
    done = tirex("retrieve", "--model", "bm25", "-k", "3",
                 env={"TIRA_INPUT_DATASET": str(source), "TIRA_OUTPUT_DIR": str(target)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = read_back(target)
    assert set(run["qid"]) <= {str(q) for q in QUERIES} and (run.groupby("qid").size() <= 3).all()
    assert run.loc[run["qid"] == "q2", "docno"].iloc[0] == "d2"  # the only document with café / straße
    check_run(run, set(zip(run["qid"], run["docno"], strict=True)))


def test_retrieve_dense_from_corpus_gz(tmp_path):
    """Full rank with a dense model over ``corpus.jsonl.gz`` (doc_id / default_text) and ``queries.jsonl``: every
    query gets the whole (4-document) collection, each document once."""
    source, target = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    write_jsonl(source / "corpus.jsonl.gz", [{"doc_id": d, "default_text": text} for d, text in DOCS.items()])
    write_jsonl(source / "queries.jsonl", [{"qid": q, "query": query} for q, query in QUERIES.items()])
    done = tirex("retrieve", "--model", TITE, "--input", str(source), "--output-dir", str(target), "--quiet", env={})
    assert done.returncode == 0, done.stderr[-3000:]
    check_run(read_back(target), {(str(q), str(d)) for q in QUERIES for d in DOCS})
    tira_format_check(target)


@pytest.mark.parametrize("command, needs", [("rerank", "rerank.jsonl"), ("retrieve", "queries.jsonl")])
def test_an_existing_run_is_replaced_only_with_overwrite(tmp_path, command, needs):
    """As every other writer, refused before any work; TIRA gives an empty output folder, so its flow never meets the
    refusal. With --overwrite the command goes on (here to its missing input)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "run.txt").write_text("an earlier run\n")
    args = ("tirex", command, "--model", "bm25", "--input", str(tmp_path / "in"), "--output-dir", str(tmp_path / "out"))
    done = cli_here(*args)
    assert done.returncode == 2 and f"{tmp_path / 'out' / 'run.txt'} already exists; pass --overwrite" in done.stderr
    done = cli_here(*args, "--overwrite")
    assert done.returncode == 2 and needs in done.stderr and "already exists" not in done.stderr, done.stderr
    assert (tmp_path / "out" / "run.txt").read_text() == "an earlier run\n"


def test_missing_inputs_are_named(tmp_path, monkeypatch):
    for name in ("inputDataset", "outputDir", "TIRA_INPUT_DATASET", "TIRA_OUTPUT_DIR"):
        monkeypatch.delenv(name, raising=False)
    done = cli_here("tirex", "rerank", "--model", SPARSE_CE)  # in this process: a traceback would fail the test
    assert done.returncode == 2 and "$inputDataset" in done.stderr
    (tmp_path / "in").mkdir()
    done = cli_here("tirex", "rerank", "--model", SPARSE_CE, "--input", str(tmp_path / "in"), "--output-dir",
                    str(tmp_path / "o"))  # fmt: skip
    assert done.returncode == 2 and "rerank.jsonl" in done.stderr
    done = cli_here("tirex", "retrieve", "--model", "bm25", "--input", str(tmp_path / "in"),
                    env={"outputDir": str(tmp_path)})  # fmt: skip
    assert done.returncode == 2 and "queries.jsonl" in done.stderr
    write_jsonl(tmp_path / "in" / "rerank.jsonl", [{"qid": 1, "query": "q", "docno": "a", "text": None}])
    done = cli_here("tirex", "rerank", "--model", SPARSE_CE, "--input", str(tmp_path / "in"), "--output-dir",
                    str(tmp_path / "o"))  # fmt: skip
    assert done.returncode == 2 and "docno 'a'" in done.stderr and not (tmp_path / "o" / "run.txt").exists()


def test_dockerfile_runs_the_tirex_command_offline():
    """The image recipe (not built here: no network) installs the package, fetches the weights at build time and
    runs offline with a command that exists."""
    recipe = (ROOT / "Dockerfile").read_text()
    assert "t.load(os.environ['MODEL']" in recipe and "HF_HUB_OFFLINE=1" in recipe
    assert "pyterrier-tite tirex rerank" in recipe and "pyterrier-tite doctor" in recipe  # kernels compiled in
    done = subprocess.run([sys.executable, "-m", "pyterrier_tite", "tirex", "rerank", "--help"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "--model" in done.stdout
