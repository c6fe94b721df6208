"""Nothing lost under faults, round two (issue 64): writers that meet each other, a full disk and dead processes.

Each cell asserts the contracted outcome: the right answer, or a non-zero exit with one line naming the file / pid
and what to do, with nothing half-written at the target and no debris beside it. Processes that may die, hold a lock
or run under a file-size limit are real subprocesses. The matrix:

- **concurrent writers** (class 1): two ``index`` commands started together on one new index: exactly one
  succeeds, the other fails at once naming the winner's pid, and the index holds the winner's corpus entirely; the
  same for two ``retrieve --out`` to one run file. Every writer (``index``, ``retrieve --out``, ``rerank --out``,
  ``tirex rerank --output``, the library's BM25 build, ``model >> FlexIndex``, ``write_trec_run``) refuses a target
  another process is writing, naming its pid, before any model is loaded.
- **file-size limits** (class 2, ``RLIMIT_FSIZE`` as ``ulimit -f`` sets it): a BM25 build whose files PISA cuts short
  (silently, or aborting) and a run file that does not fit fail naming the file and ``File too large``; a run file
  whose ``fsync`` fails (a full disk) is an error too. Nothing at the target, no staging files.
- **write targets checked first** (class 4): an output path under a regular file (or a read-only folder, when not
  running as root) fails naming the path before any model is loaded or any document scored.
- **debris** (class 9): an ``index`` killed (SIGKILL) mid-build leaves its staging folder and lock; the next build
  of the same path takes the lock over and leaves only the index. ``index --overwrite`` onto a regular file leaves
  only the index.

Corpora are tiny files made here; BM25 (PISA) is the engine, so no model is loaded anywhere.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _cli import cli_here

TITE = "webis/tite-2-late-msmarco"
TOPICS = "1\tplasma stars\n2\tcold dense matter\n3\thot physics\n"
WORDS = "red blue hot cold dense plasma stars physics matter light".split()


def corpus(prefix: str, n: int = 30) -> list[dict]:
    rng = random.Random(prefix)
    return [{"docno": f"{prefix}{i}", "text": " ".join(rng.choices(WORDS, k=8))} for i in range(n)]


def write_corpus(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


def env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def cli(*args: str, preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pyterrier_tite", *args], capture_output=True, text=True, timeout=300, env=env(),
        preexec_fn=preexec,
    )  # fmt: skip


#: runs ``pyterrier-tite ARGS`` with its corpus (``index``) or its retrieval (``retrieve``) stalled until the file GO
#: exists; writes its pid to STARTED when it stalls
STALLED = """
import os, sys, time
from pathlib import Path
go, started = Path(sys.argv[1]), Path(sys.argv[2])
import pyterrier_tite.cli.batch as cli_batch
import pyterrier_tite.cli.service as service

def stall():
    started.write_text(str(os.getpid()))
    while not go.exists():
        time.sleep(0.05)

corpus_documents = cli_batch.corpus_documents
def stalled_corpus(source):
    for number, doc in enumerate(corpus_documents(source)):
        if number == 2:
            stall()
        yield doc
cli_batch.corpus_documents = stalled_corpus
retrieve = service.retrieve
def stalled_retrieve(*args, **kwargs):
    stall()
    return retrieve(*args, **kwargs)
service.retrieve = stalled_retrieve
from pyterrier_tite.cli import main
sys.exit(main(sys.argv[3:]))
"""


def stalled(folder: Path, name: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", STALLED, str(folder / "go"), str(folder / f"started-{name}"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip


def wait_until(condition, timeout: float = 60) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def finish(process: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def indexed_docnos(index: Path) -> list[str]:
    return (index / "fwd.documents").read_text().split()


def debris(folder: Path, keep: set[str]) -> list[str]:
    """Everything in ``folder`` but ``keep``: staging folders, replaced copies, locks (a folder a failed command
    created for its output is removed again)."""
    return sorted(p.name for p in folder.iterdir() if p.name not in keep) if folder.exists() else []


def limited_file_size(size: int):
    """``preexec_fn`` of a child under ``ulimit -f``: writes past ``size`` bytes fail with EFBIG (SIGXFSZ ignored)."""

    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return preexec


#: command -> its arguments writing to OUT (the ``tirex`` commands write OUT/run.txt)
COMMANDS = {
    "index": lambda f, out: ("index", "--model", "bm25", "--dataset", str(f / "corpus.jsonl"), "--index", out),
    "retrieve --out": lambda f, out: (
        "retrieve", "--index", str(f / "bm25"), "--topics", str(f / "topics.tsv"), "--output", out
    ),  # fmt: skip
    "rerank --out": lambda f, out: (
        "rerank", "--model", TITE, "--run", str(f / "run.txt"), "--topics", str(f / "topics.tsv"), "--dataset",
        str(f / "corpus.jsonl"), "--output", out,
    ),  # fmt: skip
    "tirex rerank --output": lambda f, out: (
        "tirex", "rerank", "--model", TITE, "--input", str(f / "tirex"), "--output-dir", out
    ),  # fmt: skip
    "tirex retrieve --output": lambda f, out: (
        "tirex", "retrieve", "--model", "bm25", "--input", str(f / "tirex"), "--output-dir", out
    ),  # fmt: skip
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A corpus, topics and a BM25 index opened once (PISA's derived files written), a run and a TIREx input."""
    from pyterrier_tite.cli.service import build_index, index_retriever

    folder = tmp_path_factory.mktemp("files")
    write_corpus(folder / "corpus.jsonl", corpus("d"))
    (folder / "topics.tsv").write_text(TOPICS, encoding="utf-8")
    build_index("bm25", corpus("d"), folder / "bm25", verbose=False)
    index_retriever(folder / "bm25", k=5)
    (folder / "run.txt").write_text("".join(f"{q} Q0 d{i} {i + 1} {9 - i} x\n" for q in "123" for i in range(4)))
    (folder / "tirex").mkdir()
    rows = [{"qid": q, "query": "plasma", "docno": f"d{i}", "text": "plasma stars"} for q in "123" for i in range(3)]
    write_corpus(folder / "tirex" / "rerank.jsonl", rows)
    (folder / "tirex" / "queries.jsonl").write_text("".join(json.dumps({"qid": q, "query": "x"}) + "\n" for q in "12"))
    write_corpus(folder / "tirex" / "documents.jsonl", corpus("d", 3))
    (folder / "blocker").write_text("a regular file where a folder is expected\n")
    return folder


@pytest.fixture
def no_work(monkeypatch):
    """Every step that does the work (loading a model, building, retrieving, scoring) fails the test if reached."""
    import pyterrier_tite.cli.service as service

    def reached(*args, **kwargs):
        raise AssertionError("the work started before the write target was checked")

    for name in ("load_model", "build_index", "index_retriever", "retrieve", "rerank"):
        monkeypatch.setattr(service, name, reached)


# ------------------------------------------------------------------------------------------ 1. concurrent writers
def test_two_index_commands_started_together_one_wins_whole(tmp_path):
    """Both start together and stall inside their build; the one that got the index first finishes, the other has
    failed at once naming its pid. The index holds the winner's corpus, all of it."""
    corpora = {name: write_corpus(tmp_path / f"{name}.jsonl", corpus(name)) for name in ("a", "b")}
    index = tmp_path / "out" / "idx"
    runs = {name: stalled(tmp_path, name, "index", "--model", "bm25", "--dataset", str(path), "--index", str(index),
                          "--quiet") for name, path in corpora.items()}  # fmt: skip
    started = {name: tmp_path / f"started-{name}" for name in runs}
    wait_until(lambda: any(p.poll() is not None for p in runs.values()) or all(f.exists() for f in started.values()))
    (tmp_path / "go").touch()
    done = {name: finish(p) for name, p in runs.items()}
    winners = [name for name, d in done.items() if d.returncode == 0]
    assert len(winners) == 1, {name: d.stderr[-1500:] for name, d in done.items()}
    winner, loser = winners[0], next(name for name in done if name not in winners)
    message = done[loser].stderr.strip()
    assert done[loser].returncode != 0 and "Traceback" not in message, message
    # the holder named is the winner's process or, when the lock changed hands inside it, one of its own processes
    assert re.search(rf"{re.escape(str(index))} is being written by pid \d+ ", message), message
    assert message.count("\n") == 0
    assert indexed_docnos(index) == [d["docno"] for d in corpus(winner)]
    assert debris(index.parent, {"idx"}) == []


def test_two_retrieves_into_one_run_file(files, tmp_path):
    """The first holds the run file while it retrieves; the second fails at once naming it; the file is the
    first's run, whole."""
    run = tmp_path / "bm25.run"
    common = ("retrieve", "--index", str(files / "bm25"), "--topics", str(files / "topics.tsv"), "--output", str(run))
    first = stalled(tmp_path, "first", *common, "-k", "2", "--quiet")
    assert wait_until(lambda: (tmp_path / "started-first").exists() or first.poll() is not None)
    second = cli(*common, "-k", "3", "--quiet")
    (tmp_path / "go").touch()
    first_done = finish(first)
    assert first_done.returncode == 0, first_done.stderr[-2000:]
    assert second.returncode != 0 and f"{run} is being written by pid {first.pid}" in second.stderr, second.stderr
    assert "Traceback" not in second.stderr
    lines = run.read_text().splitlines()
    assert len(lines) == 6 and {line.split()[0] for line in lines} == {"1", "2", "3"}
    assert debris(tmp_path, {"bm25.run", "go", "started-first"}) == []


#: a process that holds the write lock of every path it is given until its stdin closes
HOLDER = """
import contextlib, sys
from pyterrier_tite.store.locks import write_lock
with contextlib.ExitStack() as stack:
    for path in sys.argv[1:]:
        stack.enter_context(write_lock(path))
    print("held", flush=True)
    sys.stdin.read()
"""

#: library writers: name -> write(target)
LIBRARY = {
    "build_pisa_index": lambda t: _library_bm25(t),
    "model >> FlexIndex": lambda t: _library_flex(t),
    "write_trec_run": lambda t: _library_run(t),
}


def _library_bm25(target: str):
    from pyterrier_tite.store.pisa_build import build_pisa_index

    build_pisa_index(iter(corpus("d", 5)), target, ["text"])


def _library_flex(target: str):
    import pyterrier as pt
    import pyterrier_dr

    from pyterrier_tite.pt.biencoder import FlexIndexing

    class Encoder(pt.Transformer):
        text_field = "text"

        def transform(self, inp):
            return inp.assign(doc_vec=[np.ones(4, dtype=np.float32)] * len(inp))

    FlexIndexing(Encoder(), pyterrier_dr.FlexIndex(target, verbose=False)).index(iter(corpus("d", 5)))


def _library_run(target: str):
    from pyterrier_tite.store.runs import write_trec_run

    write_trec_run(pd.DataFrame({"qid": ["1"], "docno": ["d1"], "score": [1.0]}), target)


@pytest.fixture(scope="module")
def holder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("held")
    targets = {kind: str(folder / re.sub(r"\W+", "_", kind) / "target") for kind in [*COMMANDS, *LIBRARY]}
    for kind in ("tirex rerank --output", "tirex retrieve --output"):
        targets[kind] = str(Path(targets[kind]).parent / "run.txt")
    process = subprocess.Popen([sys.executable, "-c", HOLDER, *targets.values()], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=env())  # fmt: skip
    ready = process.stdout.readline().strip()
    yield process, targets, ready
    process.stdin.close()
    process.wait(60)


@pytest.mark.parametrize("kind", [*COMMANDS, *LIBRARY])
def test_a_target_being_written_is_refused_naming_the_holder(files, holder, no_work, kind):
    process, targets, ready = holder
    assert ready == "held", "the holder could not take the write locks"
    target = targets[kind]
    expected = f"{target} is being written by pid {process.pid}"
    if kind in LIBRARY:
        with pytest.raises(OSError, match=re.escape(expected)):
            LIBRARY[kind](target)
    else:
        out = str(Path(target).parent) if kind.startswith("tirex") else target
        done = cli_here(*COMMANDS[kind](files, out))
        assert done.returncode == 2 and expected in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not os.path.exists(target)
    assert sorted(os.listdir(Path(target).parent)) == [f".{Path(target).name}.lock"]  # the holder's lock only


# ------------------------------------------------------------------------------------------ 2. file-size limits
def _unique_terms_corpus(n: int = 500) -> list[dict]:
    """Long docnos and terms: PISA's lexicon files are the largest, and PISA never notices they were cut."""
    text = "{}x{}abcdefghijklmnopqrstuvwxyz"
    return [{"docno": f"document-{i:06d}-with-a-long-identifier", "text": " ".join(text.format(i, j) for j in range(3))}
            for i in range(n)]  # fmt: skip


def _random_corpus(n: int = 2000) -> list[dict]:
    """Many postings: PISA's inverted files are cut, and PISA aborts the process inverting them."""
    rng = random.Random(0)
    vocabulary = [f"w{i}" for i in range(3000)]
    return [{"docno": f"d{i}", "text": " ".join(rng.choices(vocabulary, k=30))} for i in range(n)]


@pytest.mark.parametrize(
    ("make", "limit"), [(_unique_terms_corpus, 20_000), (_random_corpus, 30_000)], ids=["truncated", "aborted"]
)
def test_a_bm25_build_cut_by_the_file_size_limit_fails_naming_the_file(tmp_path, make, limit):
    source = write_corpus(tmp_path / "corpus.jsonl", make())
    index = tmp_path / "out" / "idx"
    done = cli("index", "--model", "bm25", "--dataset", str(source), "--index", str(index), "--quiet",
               preexec=limited_file_size(limit))  # fmt: skip
    message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert done.returncode == 2 and "written" not in done.stdout, (done.returncode, done.stdout, done.stderr[-2000:])
    assert message.startswith("pyterrier-tite index: error:") and "File too large" in message, done.stderr[-2000:]
    assert re.search(r"\b(fwd|inv)(\.[a-z0-9.]+)? reached the file-size limit", message), message
    assert str(index) in message and "nothing was written" in message, message
    assert not index.exists() and debris(index.parent, set()) == []


def test_a_run_file_cut_by_the_file_size_limit_fails_naming_it(files, tmp_path):
    """40 queries x 30 documents: a run of about 36 kB under a limit of 16 kB (PISA's stopword file, 5 kB, fits)."""
    run = tmp_path / "out" / "bm25.run"
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"{q}\t{WORDS[q % len(WORDS)]} {WORDS[q // len(WORDS)]}\n" for q in range(40)))
    done = cli("retrieve", "--index", str(files / "bm25"), "--topics", str(topics), "--output", str(run), "-k", "30",
               "--quiet", preexec=limited_file_size(16384))  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"{run}" in done.stderr and "File too large" in done.stderr, done.stderr
    assert not run.exists() and debris(run.parent, set()) == []


def test_a_run_file_whose_flush_to_disk_fails_is_an_error_and_keeps_the_old_file(tmp_path, monkeypatch):
    """A full disk may only show when the data reaches it (``fsync``): the old run stays, no staging file."""
    from pyterrier_tite.store.runs import write_trec_run

    run = tmp_path / "run.txt"
    run.write_text("1 Q0 old 1 1.0 before\n")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    frame = pd.DataFrame({"qid": ["1", "1"], "docno": ["a", "b"], "score": [2.0, 1.0]})
    with pytest.raises(OSError, match=f"{re.escape(str(run))}.*No space left on device"):
        write_trec_run(frame, run)
    assert run.read_text() == "1 Q0 old 1 1.0 before\n" and debris(tmp_path, {"run.txt"}) == []


# ------------------------------------------------------------------------------- 4. targets checked before the work
@pytest.mark.parametrize("where", ["under a regular file", "in a read-only folder"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_unwritable_target_fails_before_the_work(files, tmp_path, no_work, command, where):
    if where == "under a regular file":
        blocked, out = files / "blocker", str(files / "blocker" / "out")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        blocked = tmp_path / "read-only"
        blocked.mkdir(mode=0o555)
        out = str(blocked / "out")
    done = cli_here(*COMMANDS[command](files, out))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"cannot write {out}" in done.stderr and str(blocked) in done.stderr, done.stderr


# ------------------------------------------------------------------------------------------------------- 9. debris
def test_an_index_killed_mid_build_leaves_nothing_after_the_next_build(tmp_path):
    """SIGKILL while PISA reads the corpus leaves a staging folder and a lock of a dead process; the next build of
    the path takes the lock over, clears that debris and leaves only the index."""
    out = tmp_path / "out"
    index = out / "idx"
    killed = stalled(tmp_path, "killed", "index", "--model", "bm25", "--index", str(index), "--quiet", "--dataset",
                     str(write_corpus(tmp_path / "a.jsonl", corpus("a"))))  # fmt: skip
    assert wait_until(lambda: (tmp_path / "started-killed").exists() or killed.poll() is not None)
    killed.kill()
    finish(killed)
    assert not index.exists() and any(".building-" in name for name in debris(out, set()))
    done = cli("index", "--model", "bm25", "--dataset", str(write_corpus(tmp_path / "b.jsonl", corpus("b"))),
               "--index", str(index), "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert indexed_docnos(index) == [d["docno"] for d in corpus("b")]
    assert debris(out, {"idx"}) == []


def test_overwrite_onto_a_regular_file_leaves_only_the_index(files, tmp_path):
    target = tmp_path / "target"
    target.write_text("not an index\n")
    done = cli_here("index", "--model", "bm25", "--dataset", str(files / "corpus.jsonl"), "--index", str(target),
                    "--overwrite", "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert target.is_dir() and debris(tmp_path, {"target"}) == []
