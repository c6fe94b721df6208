"""Nothing lost under faults, round two (issue 64): PISA's derived files, ``k`` at the edges, one-line CLI errors.

Each cell asserts the contracted outcome: the right answer, or a clear error (non-zero exit, one line naming the file,
folder or value and what to do) with nothing half-written left. The matrix:

- **derived files that cannot be written** (class 3): PISA writes its compressed index and block-max data beside an
  index the first time a retriever opens it, and aborts the process (SIGABRT, no message) when a write fails. A full
  disk is a file-size limit in a subprocess (``RLIMIT_FSIZE`` with ``SIGXFSZ`` ignored: a write past it fails with
  ``EFBIG`` as one on a full disk fails with ``ENOSPC``): opening a never-opened BM25 (``retrieve``) or SPLADE
  ``toks`` index ends with one line naming the folder, no signal, no partial file left, and the index then answers a
  normal process as a fresh copy does. A read-only index of another user is a subprocess that gives up the
  capabilities that let root write anywhere (as another user, a ``chmod`` suffices): it is answered from a per-user
  cache of the derived files, the index untouched; one already derived is used in place; with the cache unwritable
  too, one error names both folders.
- **k at the edges** (class 5): dense retrieval with ``k=1`` and over a one-document index gives one row per query
  with scalar cells (pyterrier_dr's retrievers return 1-element arrays as cells there), also through
  ``rerank --first-stage <dense index> -k 1``; a huge ``k`` on BM25, SPLADE and dense gives the whole ranking (PISA
  allocates ``k`` results per query up front, so ``k`` is cut to the collection size).
- **CLI errors** (class 10): ``demo --systems ''`` / unknown systems / ``--rerank-depth`` below 1 / a missing
  ``--models`` folder are argparse errors; a ``CorruptIndexError``, a ``CheckpointError`` and a missing input file
  from any command are one ``pyterrier-tite COMMAND: error: ...`` line and exit 2; a real bug keeps its traceback, and
  ``PYTERRIER_TITE_DEBUG=1`` shows the traceback of the expected ones too.

Models are the tiny offline hub fixtures (``../shared/hub``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from _cli import cli_here
from _hub import require_fixtures, snapshot

pytestmark = pytest.mark.usefixtures("single_thread")

TITE = "webis/tite-2-late-msmarco"
SPLADE = "naver/splade-cocondenser-ensembledistil"
WORDS = "red blue hot cold dense".split()
DOCS = [{"docno": f"d{i}", "text": f"plasma physics of {w} stars"} for i, w in enumerate(WORDS)]
QUERIES = pd.DataFrame({"qid": ["q1", "q2"], "query": ["hot plasma", "cold dense stars"]})
#: a corpus whose derived PISA files (about 70 KB and 100 KB) do not fit under :data:`LIMIT` while everything else
#: a retrieval writes (pyterrier_pisa's stop-word file, 5 KB) does
LIMIT = 32 * 1024
BIG_QUERIES = pd.DataFrame({"qid": ["1", "2"], "query": ["w1 w2 w3", "w10 w20"]})
BIG_TOKS = pd.DataFrame({"qid": ["1", "2"], "query_toks": [{"w1": 1.0, "w2": 2.0}, {"w10": 0.5, "w20": 1.5}]})


def big_docs(toks: bool = False) -> list[dict]:
    rng = random.Random(0)
    if toks:
        return [
            {"docno": f"d{i}", "toks": {f"w{rng.randrange(2000)}": rng.uniform(0.1, 3) for _ in range(30)}}
            for i in range(3000)
        ]
    return [{"docno": f"d{i}", "text": " ".join(f"w{rng.randrange(2000)}" for _ in range(30))} for i in range(3000)]


def run_of(frame: pd.DataFrame) -> list[tuple[str, str]]:
    frame = frame.sort_values(["qid", "rank"], kind="stable")
    return list(zip(frame["qid"], frame["docno"], strict=True))


def topics_text(queries: pd.DataFrame) -> str:
    return "".join(f"{q}\t{t}\n" for q, t in queries[["qid", "query"]].itertuples(index=False))


def derived(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.bmw.*"))


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


def one_line_error(done: subprocess.CompletedProcess, command: str, *named: str) -> str:
    """The error line of a refused command: exit 2, no traceback, one line ``pyterrier-tite COMMAND: error: ...``
    naming ``named``."""
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith(f"pyterrier-tite {command}: error: "), done.stderr[-3000:]
    for name in named:
        assert name in errors[0], (name, errors[0])
    return errors[0]


# ---------------------------------------------------------------------------------------------------- models, indexes
@pytest.fixture(scope="module")
def models():
    require_fixtures()
    import pyterrier_tite as t

    return {
        "TITE": t.TITE.from_pretrained(TITE, device="cpu"),
        "Splade": t.Splade.from_pretrained(SPLADE, device="cpu"),
    }


@pytest.fixture(scope="module")
def small(models, tmp_path_factory) -> dict[str, Path]:
    """Indexes of :data:`DOCS` built by ``pyterrier-tite index``'s code (so they name their model), and a dense index
    of one document."""
    from pyterrier_tite.cli.service import build_index

    folder = tmp_path_factory.mktemp("small")
    for kind, name in {"bm25": "bm25", "splade": SPLADE, "dense": TITE}.items():
        build_index(name, iter(DOCS), folder / kind, model=models.get({"splade": "Splade", "dense": "TITE"}.get(kind)),
                    verbose=False)  # fmt: skip
    build_index(TITE, iter(DOCS[:1]), folder / "dense-one", model=models["TITE"], verbose=False)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (folder / "topics.tsv").write_text(topics_text(QUERIES))
    return {p.name: p for p in folder.iterdir()}


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> dict[str, Path]:
    """Never-opened PISA indexes of 3000 documents: ``bm25`` (text, with the index record ``retrieve`` reads) and
    ``toks`` (SPLADE's layout, quantised ``toks``), and the topics of the first as a file."""
    from pyterrier_pisa import PisaIndex

    from pyterrier_tite.cli.service import build_index
    from pyterrier_tite.pt.splade import PISA_SCALE

    folder = tmp_path_factory.mktemp("big")
    build_index("bm25", iter(big_docs()), folder / "bm25", verbose=False)
    PisaIndex(str(folder / "toks"), stemmer="none").toks_indexer(scale=PISA_SCALE).index(big_docs(toks=True))
    (folder / "topics.tsv").write_text(topics_text(BIG_QUERIES))
    assert not derived(folder / "bm25") and not derived(folder / "toks")
    return {"bm25": folder / "bm25", "toks": folder / "toks", "topics": folder / "topics.tsv"}


def big_runs(paths: dict[str, Path]) -> dict[str, list]:
    """What a normal process retrieves from the indexes at ``paths``."""
    from pyterrier_tite.cli.service import index_retriever
    from pyterrier_tite.pt.splade import SpladePisaRetriever

    return {
        "bm25": run_of(index_retriever(paths["bm25"], k=10)(BIG_QUERIES)),
        "toks": run_of(SpladePisaRetriever(str(paths["toks"]), num_results=10)(BIG_TOKS)),
    }


@pytest.fixture(scope="module")
def big_reference(big, tmp_path_factory) -> dict[str, list]:
    folder = tmp_path_factory.mktemp("big_reference")
    copies = {kind: Path(shutil.copytree(big[kind], folder / kind)) for kind in ("bm25", "toks")}
    runs = big_runs(copies)
    assert all(len(run) == 20 for run in runs.values()), runs
    return runs


def fresh_copies(big, folder: Path) -> dict[str, Path]:
    return {kind: Path(shutil.copytree(big[kind], folder / kind)) for kind in ("bm25", "toks")}


# ----------------------------------------------------------------------------------- class 3: derived files, full disk
FULL_DISK = r"""
import json, resource, signal, sys, tempfile
from pyterrier_tite.cli import main
import pyterrier_pisa, pyterrier_tite.cli.batch, pyterrier_tite.cli.service, pyterrier_tite.store.text_files
import pyterrier_tite.store.runs
from pyterrier_tite.pt.splade import SpladePisaRetriever
tempfile.gettempdir()  # found before the limit: Python finds it by writing a file
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as one on a full disk does
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
if sys.argv[2] == "cli":
    sys.exit(main(sys.argv[3:]))
try:
    SpladePisaRetriever(sys.argv[3], num_results=10)
    print(json.dumps(["opened", ""]))
except OSError as exc:
    print(json.dumps([type(exc).__name__, str(exc)]))
"""


def under_file_size_limit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(LIMIT), *args], capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


def test_full_disk_on_first_bm25_retrieval_is_one_line(big, big_reference, tmp_path):
    paths = fresh_copies(big, tmp_path)
    out = tmp_path / "run.txt"
    done = under_file_size_limit("cli", "retrieve", "--index", str(paths["bm25"]), "--topics", str(big["topics"]),
                                 "--output", str(out), "--quiet")  # fmt: skip
    assert done.returncode >= 0, f"killed by signal {-done.returncode}: {done.stderr[-2000:]}"
    line = one_line_error(done, "retrieve", str(paths["bm25"]))
    assert "ulimit -f" in line and "run again" in line, line  # the cause, and what to do
    assert not derived(paths["bm25"]) and not out.exists(), "nothing half-written is left"
    assert big_runs(paths)["bm25"] == big_reference["bm25"], "a normal process then answers as from a fresh copy"


def test_full_disk_on_first_splade_retrieval_is_an_error(big, big_reference, tmp_path):
    paths = fresh_copies(big, tmp_path)
    done = under_file_size_limit("api", str(paths["toks"]))
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    kind, message = json.loads(done.stdout.strip().splitlines()[-1])
    assert kind != "opened" and str(paths["toks"]) in message and "\n" not in message, (kind, message)
    assert not derived(paths["toks"]), "nothing half-written is left"
    assert big_runs(paths)["toks"] == big_reference["toks"]


# ------------------------------------------------------------------------------------ class 3: a read-only index
READ_ONLY = r"""
import ctypes, json, os, sys

def give_up_root_file_powers():
    '''Root without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH / CAP_FOWNER (also for the programs it starts) writes
    only where the mode bits let its user write, as another user would.'''
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    caps = (1, 2, 3)
    for cap in caps:
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    keep = ~sum(1 << cap for cap in caps) & 0xFFFFFFFF
    data[0].effective &= keep
    data[0].permitted &= keep
    data[0].inheritable &= keep
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")

try:
    give_up_root_file_powers()
except OSError as exc:
    print(json.dumps({"skip": f"cannot give up root's file capabilities: {exc}"}))
    sys.exit(0)
import pandas as pd
from pyterrier_tite.cli.service import index_retriever
from pyterrier_tite.pt.splade import SpladePisaRetriever
cells = json.loads(sys.argv[1])
big_queries = pd.DataFrame({"qid": ["1", "2"], "query": ["w1 w2 w3", "w10 w20"]})
big_toks = pd.DataFrame({"qid": ["1", "2"], "query_toks": [{"w1": 1.0, "w2": 2.0}, {"w10": 0.5, "w20": 1.5}]})
results = {}
for name, kind, path, home in cells:
    os.environ["PYTERRIER_TITE_HOME"] = home
    try:
        assert not os.access(path, os.W_OK), f"{path} is writable: the simulation failed"
        if kind == "bm25":
            run = index_retriever(path, k=10)(big_queries)
        else:
            run = SpladePisaRetriever(path, num_results=10)(big_toks)
        run = run.sort_values(["qid", "rank"], kind="stable")
        results[name] = ["run", [list(r) for r in zip(run["qid"], run["docno"])]]
    except OSError as exc:
        results[name] = [type(exc).__name__, str(exc)]
print(json.dumps(results))
"""


def make_read_only(folder: Path) -> None:
    for file in folder.iterdir():
        file.chmod(0o444)
    folder.chmod(0o555)


def make_writable(folder: Path) -> None:
    folder.chmod(0o755)
    for file in folder.iterdir():
        file.chmod(0o644)


@pytest.fixture(scope="module")
def read_only(big, big_reference, tmp_path_factory):
    """Cells opened by a process that may not write the index folders: ``(fresh, derived, cache root, refusing
    cache root, outcomes)``."""
    folder = tmp_path_factory.mktemp("read_only")
    fresh = fresh_copies(big, folder / "fresh")
    already = fresh_copies(big, folder / "derived")
    big_runs(already)  # the owner opened these once: their derived files are recorded complete
    refused = fresh_copies(big, folder / "refused")
    cache, refusing = folder / "cache", folder / "read-only-cache"
    cache.mkdir()
    refusing.mkdir()
    for path in [*fresh.values(), *already.values(), *refused.values()]:
        make_read_only(path)
    refusing.chmod(0o555)
    before = {str(p): listing(p) for p in [*fresh.values(), *already.values(), *refused.values()]}
    cells = [
        *[[f"fresh {k}", "bm25" if k == "bm25" else "toks", str(p), str(cache)] for k, p in fresh.items()],
        *[[f"again {k}", "bm25" if k == "bm25" else "toks", str(p), str(cache)] for k, p in fresh.items()],
        *[[f"derived {k}", "bm25" if k == "bm25" else "toks", str(p), str(cache)] for k, p in already.items()],
        *[[f"refused {k}", "bm25" if k == "bm25" else "toks", str(p), str(refusing)] for k, p in refused.items()],
    ]
    try:
        done = subprocess.run(
            [sys.executable, "-c", READ_ONLY, json.dumps(cells)], capture_output=True, text=True, timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
        assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
        outcomes = json.loads(done.stdout.strip().splitlines()[-1])
        if "skip" in outcomes:
            pytest.skip(outcomes["skip"])
        after = {str(p): listing(p) for p in [*fresh.values(), *already.values(), *refused.values()]}
        yield {"fresh": fresh, "cache": cache, "refusing": refusing, "outcomes": outcomes, "before": before,
               "after": after}  # fmt: skip
    finally:
        refusing.chmod(0o755)
        for path in [*fresh.values(), *already.values(), *refused.values()]:
            make_writable(path)


@pytest.mark.parametrize("kind", ["bm25", "toks"])
def test_read_only_index_is_answered_from_a_cache(read_only, big_reference, kind):
    outcomes = read_only["outcomes"]
    for cell in (f"fresh {kind}", f"again {kind}", f"derived {kind}"):
        outcome, run = outcomes[cell]
        assert outcome == "run", (cell, run)
        assert [tuple(r) for r in run] == big_reference[kind], cell
    assert read_only["after"] == read_only["before"], "the read-only indexes are untouched"
    cached = [p for p in (read_only["cache"] / "pisa-derived").iterdir() if derived(p)]
    assert len(cached) == 2, "one cache folder per fresh index (reused when opened again; none for a derived one)"


@pytest.mark.parametrize("kind", ["bm25", "toks"])
def test_read_only_index_without_a_writable_cache_is_refused(read_only, kind):
    outcome, message = read_only["outcomes"][f"refused {kind}"]
    assert outcome != "run" and "\n" not in message, (outcome, message)
    assert "read-only" in message and str(read_only["refusing"]) in message, message
    assert "PYTERRIER_TITE_HOME" in message, message  # what to do


# ------------------------------------------------------------------------------------------- class 5: k at the edges
def test_dense_k1_gives_one_scalar_row_per_query(models, small):
    from pyterrier_tite.cli.service import index_retriever

    top = index_retriever(small["dense"], k=10, model=models["TITE"])(QUERIES)
    run = index_retriever(small["dense"], k=1, model=models["TITE"])(QUERIES)
    assert list(run["qid"]) == ["q1", "q2"]
    assert all(isinstance(d, str) for d in run["docno"]) and run["score"].dtype.kind == "f"
    assert list(run["docno"]) == list(top[top["rank"] == top["rank"].min()]["docno"])


def test_dense_one_document_index(models, small):
    from pyterrier_tite.cli.service import index_retriever

    run = index_retriever(small["dense-one"], k=10, model=models["TITE"])(QUERIES)
    assert list(run["docno"]) == ["d0", "d0"] and run["score"].dtype.kind == "f"
    assert pd.api.types.is_integer_dtype(run["rank"])


def test_rerank_first_stage_dense_k1(models, small, tmp_path):
    out = tmp_path / "run.txt"
    done = cli_here("rerank", "--first-stage", str(small["dense"]), "--model", TITE, "--dataset",
                    str(small["corpus.jsonl"]), "--topics", str(small["topics.tsv"]), "--output", str(out), "-k", "1",
                    "--device", "cpu", "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert [line.split()[0] for line in out.read_text().splitlines()] == ["q1", "q2"]


@pytest.mark.parametrize("kind", ["bm25", "splade", "dense"])
def test_huge_k_is_cut_to_the_collection_size(models, small, kind):
    from pyterrier_tite.cli.service import index_retriever

    model = {"splade": models["Splade"], "dense": models["TITE"]}.get(kind)
    whole = index_retriever(small[kind], k=1000, model=model)(QUERIES)
    huge = index_retriever(small[kind], k=10**12, model=model)(QUERIES)
    assert run_of(huge) == run_of(whole) and len(whole) > 0


# ---------------------------------------------------------------------------------------------- class 10: CLI errors
@pytest.mark.parametrize(
    "flags, named",
    [
        (["--systems", ""], "--systems"),
        (["--systems", " , "], "--systems"),
        (["--systems", "bm25,colbert"], "colbert"),
        (["--depth", "-5"], "--depth"),
        (["--depth", "0"], "--depth"),
    ],
)
def test_demo_arguments_are_checked_when_parsed(flags, named):
    done = cli_here("demo", "--dataset", "no-such-dataset", *flags)
    one_line_error(done, "demo", named)


def test_demo_missing_models_folder_is_one_line(tmp_path):
    done = cli_here("demo", "--dataset", "no-such-dataset", "--models", str(tmp_path / "missing"))
    one_line_error(done, "demo", str(tmp_path / "missing"))


def test_corrupt_index_is_one_line(small, tmp_path):
    path = Path(shutil.copytree(small["bm25"], tmp_path / "bm25"))
    (path / "fwd.doclex").unlink()
    done = cli_here("retrieve", "--index", str(path), "--topics", str(small["topics.tsv"]), "--output",
                    str(tmp_path / "run.txt"))  # fmt: skip
    line = one_line_error(done, "retrieve", str(path), "fwd.doclex")
    assert "--overwrite" in line, line  # says how to rebuild it
    assert not (tmp_path / "run.txt").exists()


def test_checkpoint_error_is_one_line(tmp_path):
    require_fixtures()
    from safetensors.torch import save_file

    from pyterrier_tite.models.checkpoint import read_state_dict

    folder = Path(shutil.copytree(snapshot(TITE), tmp_path / "tite"))
    state = read_state_dict(folder)
    dropped = sorted(k for k in state if k.endswith("orm.weight"))[0]
    del state[dropped]
    for name in ("pytorch_model.bin", "model.safetensors"):
        (folder / name).unlink(missing_ok=True)
    save_file({k: v.clone().contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        done = cli_here("pretrain", "--model", str(folder), "--dataset", "vaswani", "--output-dir",
                        str(tmp_path / "out"))  # fmt: skip
    one_line_error(done, "pretrain", dropped.split(".")[-1])


def test_missing_input_folder_is_one_line(tmp_path):
    done = cli_here("pretrain", "--model", str(tmp_path / "nope"), "--dataset", "vaswani", "--output-dir",
                    str(tmp_path / "out"))  # fmt: skip
    one_line_error(done, "pretrain", "nope")


def test_tracebacks_stay_for_bugs_and_on_request(small, tmp_path, monkeypatch):
    import pyterrier_tite.cli.demo as demo_cli

    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(demo_cli, "demo_command", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        cli_here("demo")
    from pyterrier_tite.store.pisa_files import CorruptIndexError

    path = Path(shutil.copytree(small["bm25"], tmp_path / "bm25"))
    (path / "fwd.doclex").unlink()
    with pytest.raises(CorruptIndexError, match="fwd.doclex"):
        cli_here("retrieve", "--index", str(path), "--topics", str(small["topics.tsv"]), "--output",
                 str(tmp_path / "run.txt"), env={"PYTERRIER_TITE_DEBUG": "1"})  # fmt: skip
