"""Inputs that are not plain regular files: folders, FIFOs, pipes, ``/dev/stdin``, compressed data under any name,
bytes that are not UTF-8. Each is read once, with the right line numbers, or refused in one line naming the file;
nothing waits forever (issue 71, items 12 and 13)."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import subprocess
import sys
import threading
import time

import pytest

from pyterrier_tite.store import input_files
from pyterrier_tite.store.runs import load_qrels, read_trec_run
from pyterrier_tite.store.topics import load_topics

RUN = "".join(f"{q} Q0 d{d} {d} {10 - d}.5 sys\n" for q in (1, 2) for d in range(1, 5))
QRELS = "1 0 d1 1\n1 0 d2 0\n2 0 d3 2\n"
COMPRESSORS = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}


def bad_run_line(number: int) -> str:
    """A run whose line ``number`` has a score that is not a number."""
    lines = [f"1 Q0 d{i} {i} {100 - i}.0 sys\n" for i in range(1, number + 5)]
    lines[number - 1] = f"1 Q0 d{number} {number} high sys\n"
    return "".join(lines)


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
@pytest.mark.parametrize("name", ["run.txt", "run.gz", "run"])
def test_compressed_runs_are_read_by_their_bytes(tmp_path, kind, name):
    """gzip, bzip2 and xz runs are read whatever they are named (a `.bz2` run was read as its compressed bytes)."""
    path = tmp_path / name
    path.write_bytes(COMPRESSORS[kind](RUN.encode()))
    run = read_trec_run(path)
    assert len(run) == 8 and set(run["docno"]) == {"d1", "d2", "d3", "d4"}


def test_zstd_without_zstandard_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "run.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import fails
    with pytest.raises(ValueError, match=r"run\.zst is zstd-compressed; install zstandard"):
        read_trec_run(path)


def test_damaged_compressed_run_names_the_file(tmp_path):
    path = tmp_path / "run.gz"
    path.write_bytes(gzip.compress(RUN.encode() * 50)[:-40])  # cut
    with pytest.raises(ValueError, match=r"run\.gz, after line \d+: the compressed data is damaged or cut"):
        read_trec_run(path)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_not_utf8_names_its_own_line(tmp_path, compress):
    """A bad byte on line 41 is reported on line 41 (it was reported on line 1)."""
    lines = [f"{i}\tquery number {i}\n".encode() for i in range(1, 60)]
    lines[40] = b"41\tcaf\xe9 au lait\n"
    data = b"".join(lines)
    path = tmp_path / ("topics.tsv.gz" if compress else "topics.tsv")
    path.write_bytes(gzip.compress(data) if compress else data)
    with pytest.raises(ValueError, match=r"line 41: not UTF-8"):
        load_topics(str(path))


@pytest.mark.parametrize("reader", [load_qrels, load_topics, read_trec_run], ids=["qrels", "topics", "run"])
def test_a_folder_is_refused_naming_it(tmp_path, reader):
    """A folder is not taken for an ir_datasets id (which failed far from the cause)."""
    folder = tmp_path / "qrels-folder"
    folder.mkdir()
    with pytest.raises(ValueError, match="qrels-folder is a folder"):
        reader(str(folder))


def _fifo(tmp_path, name="run.fifo"):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    path = tmp_path / name
    os.mkfifo(path)
    return path


def test_fifo_without_a_writer_is_refused_in_seconds(tmp_path, monkeypatch):
    """Reading a FIFO nobody writes to blocked forever."""
    monkeypatch.setattr(input_files, "FIFO_WAIT_SECONDS", 0.5)
    path = _fifo(tmp_path)
    began = time.monotonic()
    with pytest.raises(ValueError, match=r"run\.fifo is a FIFO that nothing wrote to"):
        read_trec_run(path)
    assert time.monotonic() - began < 5


@pytest.mark.parametrize("content", [RUN, bad_run_line(23)], ids=["good", "bad-line-23"])
def test_fifo_is_read_once_with_line_numbers(tmp_path, content):
    """A run from a FIFO is read once: a bad line is named by its number (it was re-read and reported "empty")."""
    path = _fifo(tmp_path)

    def write():
        with open(path, "w") as f:
            f.write(content)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        if content == RUN:
            assert len(read_trec_run(path)) == 8
        else:
            with pytest.raises(ValueError, match=r"run\.fifo, line 23: score 'high' is not a number"):
                read_trec_run(path)
    finally:
        writer.join(timeout=10)


def _cli(*args, stdin: str | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyterrier_tite", *args], input=stdin, capture_output=True,
                          text=True, cwd=cwd, timeout=300)  # fmt: skip


def test_cli_reads_a_run_from_stdin_once(tmp_path):
    """``evaluate ... /dev/stdin``: the piped run is read once and evaluated (it was taken for an ir_datasets id)."""
    (tmp_path / "qrels.txt").write_text(QRELS)
    done = _cli("evaluate", "--qrels", str(tmp_path / "qrels.txt"), "/dev/stdin", "--measures", "P@1", stdin=RUN)
    assert done.returncode == 0, done.stderr
    assert "P@1" in done.stdout


def test_cli_names_the_bad_line_of_a_piped_run(tmp_path):
    (tmp_path / "qrels.txt").write_text(QRELS)
    done = _cli("evaluate", "--qrels", str(tmp_path / "qrels.txt"), "/dev/stdin", stdin=bad_run_line(23))
    assert done.returncode == 2
    assert "line 23: score 'high' is not a number" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_cli_refuses_a_qrels_folder_in_one_line(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "run.txt").write_text(RUN)
    done = _cli("evaluate", "--qrels", str(tmp_path / "qrels"), str(tmp_path / "run.txt"))
    assert done.returncode == 2 and "is a folder" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
