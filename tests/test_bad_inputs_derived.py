"""The files PISA derives from an index (block-max data, the compressed index) are memory-mapped by native code: a
damaged one crashes the process. They are trusted only as recorded complete on this machine (size, inode, time and a
BLAKE2b digest), so garbage of the right size, or a package shipping crafted files with a matching record, is
rebuilt, never mapped (issue 71, item 3). PISA runs in a child process here, so a crash fails the test, not pytest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyterrier_pisa")

WORDS = "retrieval neural index query document model attention sparse dense passage ranking bm25 pisa".split()
#: open the index's BM25 retriever (deriving what is missing) and print its ranking of a few queries as JSON
SEARCH = """
import json, sys
import pandas as pd
from pyterrier_tite.store.pisa_derived import open_pisa_retriever
from pyterrier_pisa import PisaIndex
retriever = open_pisa_retriever(PisaIndex(sys.argv[1]), "bm25", 5)
topics = pd.DataFrame({"qid": ["1", "2"], "query": ["neural ranking", "sparse index"]})
result = retriever(topics)
print(json.dumps([[r.qid, r.docno, round(float(r.score), 4)] for r in result.itertuples()]))
"""


def search(index: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SEARCH, str(index)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip


@pytest.fixture(scope="module")
def derived_index(tmp_path_factory) -> tuple[Path, list]:
    """A small PISA index whose derived files were written and recorded, and its reference ranking."""
    from pyterrier_pisa import PisaIndex

    path = tmp_path_factory.mktemp("pisa") / "index"
    docs = [{"docno": f"d{i}", "text": " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(5 + i % 9))}
            for i in range(300)]  # fmt: skip
    PisaIndex(str(path), threads=1).index(docs)
    done = search(path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(path.glob("*.bmw.*")), "no derived files were written"
    return path, json.loads(done.stdout.strip().splitlines()[-1])


def _copy(index: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(index, target, symlinks=True, copy_function=shutil.copy2)
    return target


def _garbage_same_size(file: Path) -> None:
    info = file.stat()
    file.write_bytes(os.urandom(info.st_size))
    os.utime(file, ns=(info.st_atime_ns, info.st_mtime_ns))  # the time set back too


@pytest.mark.parametrize("which", ["compressed", "block-max"])
def test_same_size_garbage_in_a_derived_file_is_rebuilt(derived_index, tmp_path, which):
    index, reference = derived_index
    copy = _copy(index, tmp_path)
    assert search(copy).returncode == 0  # the copy records its own files (new inodes)
    files = sorted(copy.glob("*.bmw.*"), key=lambda f: f.name.count("."))
    _garbage_same_size(files[-1] if which == "compressed" else files[0])
    done = search(copy)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-1500:]}"
    assert json.loads(done.stdout.strip().splitlines()[-1]) == reference


def test_crafted_files_shipped_with_their_record_are_rebuilt(derived_index, tmp_path):
    """A package carries derived files and a record that matches them (size, digest, even this machine's inode
    numbers written in): extracted here they are other files, so they are derived again."""
    import hashlib

    index, reference = derived_index
    copy = _copy(index, tmp_path)
    record = {}
    for file in copy.glob("*.bmw.*"):
        _garbage_same_size(file)
        info = file.stat()
        record[file.name] = {"size": info.st_size, "inode": info.st_ino + 1, "mtime_ns": info.st_mtime_ns,
                             "blake2b": hashlib.blake2b(file.read_bytes(), digest_size=32).hexdigest()}  # fmt: skip
    (copy / "pt_derived.json").write_text(json.dumps(record))
    done = search(copy)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-1500:]}"
    assert json.loads(done.stdout.strip().splitlines()[-1]) == reference


@pytest.mark.parametrize("planted", ["lock", "record staging"])
def test_links_planted_beside_the_derived_files_are_not_followed(derived_index, tmp_path, planted):
    index, reference = derived_index
    copy = _copy(index, tmp_path)
    for file in copy.glob("*.bmw.*"):
        file.unlink()  # derived again, so the record is written
    (copy / "pt_derived.json").unlink(missing_ok=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    if planted == "lock":
        (copy / ".pt_derived.json.lock").unlink(missing_ok=True)
        (copy / ".pt_derived.json.lock").symlink_to(victim)
        done = search(copy)
        assert done.returncode != 0 and "is a symbolic link; it is never followed" in done.stderr
    else:
        done = subprocess.run(
            [sys.executable, "-c", "import os, sys; os.symlink(sys.argv[2], os.path.join(sys.argv[1], "
             "f'.pt_derived.json.{os.getpid()}')); exec(sys.argv[3])", str(copy), str(victim),
             SEARCH.replace("sys.argv[1]", repr(str(copy)))],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-1500:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == reference
    assert victim.read_text() == "precious"
