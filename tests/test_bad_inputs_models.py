"""Model folders other people made are data: a folder that asks to run its own code, settings that contradict the
weights, a damaged tokenizer, a save cut short or a folder that lost its settings are refused in one line naming the
file, fast, before anything is built; saves are all or nothing and follow the umask (issue 71, items 6, 9-11, 14)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _tiny import save_tiny_bert

import pyterrier_tite as t
from pyterrier_tite.models.checkpoint import CheckpointError

#: the two ways a folder is opened: a dense bi-encoder through t.load, a cross-encoder through its constructor
OPENERS = {"t.load": lambda folder: t.load(folder), "SparseCE": lambda folder: t.SparseCE(folder, w=4)}


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory) -> Path:
    return Path(save_tiny_bert(tmp_path_factory.mktemp("tiny") / "bert", layers=2))


@pytest.fixture
def folder(base_folder, tmp_path) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(base_folder, copy)
    return copy


def _edit_json(path: Path, **changes) -> None:
    settings = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**settings, **changes}))


@pytest.mark.parametrize("opener", sorted(OPENERS))
@pytest.mark.parametrize("file", ["config.json", "tokenizer_config.json"])
def test_a_folder_asking_to_run_its_code_is_refused(folder, file, opener):
    """``auto_map`` made transformers prompt "run the custom code? [y/N]" (or hang); now one line, nothing asked."""
    _edit_json(folder / file, auto_map={"AutoModel": "evil.Model", "AutoTokenizer": ["evil.Tok", None]})
    with pytest.raises(CheckpointError, match=rf"{file} names Python code of its own \(auto_map\)"):
        OPENERS[opener](str(folder))


@pytest.mark.parametrize("opener", sorted(OPENERS))
@pytest.mark.parametrize(
    "setting, value",
    [("max_position_embeddings", 10**9), ("vocab_size", 10**9), ("num_hidden_layers", 10**6),
     ("type_vocab_size", 10**7), ("max_position_embeddings", 3 * 10**7)],
)  # fmt: skip
def test_absurd_sizes_are_refused_before_anything_is_built(folder, setting, value, opener):
    """A config asking for 10^9 positions tried to allocate 128 GB, 10^6 layers built for minutes."""
    _edit_json(folder / "config.json", **{setting: value})
    began = time.monotonic()
    with pytest.raises(CheckpointError, match=rf"{setting} is {value} but the weights hold"):
        OPENERS[opener](str(folder))
    assert time.monotonic() - began < 5


@pytest.mark.parametrize("damage", [os.urandom(300), b'{"version": "1.0", "model": {"type": "WordPiece"', b"[]"],
                         ids=["random-bytes", "cut-json", "wrong-json"])  # fmt: skip
def test_a_damaged_tokenizer_is_one_line(folder, damage):
    (folder / "tokenizer.json").write_bytes(damage)
    with pytest.raises(CheckpointError, match="tokenizer files .* do not load"):
        t.load(str(folder))


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_saved_files_follow_the_umask(base_folder, tmp_path, umask):
    """safetensors wrote the weights 0600 whatever the umask: a shared folder failed for other users."""
    model = t.load(str(base_folder))
    old = os.umask(umask)
    try:
        model.save_pretrained(str(tmp_path / "saved"))
    finally:
        os.umask(old)
    for path in [tmp_path / "saved", *(tmp_path / "saved").rglob("*")]:
        expected = (0o777 if path.is_dir() else 0o666) & ~umask
        assert path.stat().st_mode & 0o777 == expected, (path, oct(path.stat().st_mode & 0o777))


def test_a_save_cut_short_leaves_the_older_folder_whole(base_folder, tmp_path):
    """A save killed over an older folder left its settings with new weights; now the older folder stays as it was."""
    target = tmp_path / "saved"
    t.load(str(base_folder)).save_pretrained(str(target))
    before = {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()}
    model = t.load(str(base_folder))

    def broken(path, *args, **kwargs):
        Path(path, "config.json").write_text("{}")
        raise KeyboardInterrupt  # killed half way

    model.model.save_pretrained = broken
    with pytest.raises(KeyboardInterrupt):
        model.save_pretrained(str(target))
    assert {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved"]  # no staging folder left


def test_a_saved_folder_without_its_settings_is_refused(base_folder, tmp_path):
    """A folder of ours without pt_meta.json loaded silently with default lengths (TITE scored 3.6 off)."""
    target = tmp_path / "saved"
    t.load(str(base_folder), query_max_length=7).save_pretrained(str(target))
    (target / "pt_meta.json").unlink()
    with pytest.raises(CheckpointError, match="saved by pyterrier-tite but has no pt_meta.json"):
        t.load(str(target))


def test_a_users_readme_survives_a_save(base_folder, tmp_path):
    target = tmp_path / "saved"
    target.mkdir()
    (target / "README.md").write_text("# my notes\n")
    t.load(str(base_folder)).save_pretrained(str(target))
    assert (target / "README.md").read_text() == "# my notes\n"
    assert (target / "pt_meta.json").is_file()


@pytest.mark.parametrize("edit", [{"auto_map": {"AutoModel": "x.Y"}}, {"vocab_size": 10**9}], ids=["auto_map", "size"])
def test_the_cli_says_it_in_one_line(folder, tmp_path, edit):
    _edit_json(folder / "config.json", **edit)
    (tmp_path / "topics.tsv").write_text("1\thello\n")
    (tmp_path / "run.txt").write_text("1 Q0 d1 1 1.0 x\n")
    (tmp_path / "corpus.jsonl").write_text('{"docno": "d1", "text": "hello world"}\n')
    done = subprocess.run(
        [sys.executable, "-m", "pyterrier_tite", "rerank", "--model", str(folder),
         "--topics", str(tmp_path / "topics.tsv"), "--run", str(tmp_path / "run.txt"),
         "--dataset", str(tmp_path / "corpus.jsonl"), "--out", str(tmp_path / "o")],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "config.json" in done.stderr, done.stderr
