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
import warnings
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
         "--dataset", str(tmp_path / "corpus.jsonl"), "--output", str(tmp_path / "o")],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "config.json" in done.stderr, done.stderr


# -- loading is exact or fails: another family's checkpoint is refused naming the class that loads it (issue 80) --
#: public class -> its family's ``pt_meta.json`` format
CLASS_FAMILY = {"SparseCE": "cross-encoder", "MonoCE": "cross-encoder", "CELI": "cross-encoder", "TITE": "tite",
                "BertBiEncoder": "bert-biencoder", "Splade": "splade", "Aggretriever": "aggretriever"}  # fmt: skip
#: family -> (what the refusal calls it, a hub fixture whose load is saved as that family's folder, the class)
SAVED = {
    "cross-encoder": ("sparse cross-encoder", "webis/sparse-cross-encoder-4-4096", "SparseCE"),
    "tite": ("TITE", "webis/tite-2-late-msmarco", "TITE"),
    "bert-biencoder": ("BERT bi-encoder", "naver/efficient-splade-V-large-query", "BertBiEncoder"),
    "splade": ("SPLADE", "naver/splade-cocondenser-ensembledistil", "Splade"),
    "aggretriever": ("Aggretriever", "castorini/aggretriever-cocondenser", "Aggretriever"),
}
#: released layouts our loaders recognise -> (family, what the refusal calls it, the class that loads it)
RELEASED = {
    "webis/tite-2-late": ("tite", "TITE", "TITE"),
    "webis/tite-2-late-msmarco": ("tite", "TITE", "TITE"),
    "castorini/aggretriever-cocondenser": ("aggretriever", "Aggretriever", "Aggretriever"),
    "webis/sparse-cross-encoder-4-4096": ("cross-encoder", "sparse cross-encoder", "SparseCE"),
}
SAVED_CELLS = [(c, f) for c in CLASS_FAMILY for f in SAVED if f != CLASS_FAMILY[c]]
RELEASED_CELLS = [(c, r) for c in CLASS_FAMILY for r in RELEASED if RELEASED[r][0] != CLASS_FAMILY[c]]


@pytest.fixture(scope="module")
def family_folders(tmp_path_factory) -> dict[str, Path]:
    """A folder saved by ``save_pretrained`` of each family (from the hub fixtures)."""
    from _hub import require_fixtures

    require_fixtures()
    root = tmp_path_factory.mktemp("families")
    for fmt, (_, repo, cls) in SAVED.items():
        getattr(t, cls)(repo, device="cpu").save_pretrained(str(root / fmt))
    return {fmt: root / fmt for fmt in SAVED}


@pytest.mark.parametrize(("cls", "fmt"), SAVED_CELLS, ids=[f"{c}-{f}" for c, f in SAVED_CELLS])
def test_a_saved_folder_of_another_family_is_refused(family_folders, cls, fmt):
    """``t.SparseCE(<saved Splade>)`` scored with a random head and one warning; now it names what the folder is."""
    what, _, loader = SAVED[fmt]
    folder = family_folders[fmt]
    with pytest.raises(CheckpointError) as caught:
        getattr(t, cls)(str(folder), device="cpu")
    message = str(caught.value)
    article = "an" if what[0] in "AEIOU" else "a"
    assert message.startswith(f"{folder} is {article} {what} model (pt_meta.json format '{fmt}')"), message
    assert f"load it with t.{loader}(...) or t.load(...)" in message and "\n" not in message, message


@pytest.mark.parametrize(("cls", "repo"), RELEASED_CELLS, ids=[f"{c}-{r.split('/')[1]}" for c, r in RELEASED_CELLS])
def test_a_released_layout_of_another_family_is_refused(cls, repo):
    from _hub import require_fixtures

    require_fixtures()
    _, what, loader = RELEASED[repo]
    with pytest.raises(CheckpointError, match=rf"^{repo} is an? {what} model \(config\.json .*\): load it with "
                                              rf"t\.{loader}\(\.\.\.\) or t\.load\(\.\.\.\)$"):  # fmt: skip
        getattr(t, cls)(repo, device="cpu")


def test_a_bert_with_its_mlm_head_starts_a_reranker_with_one_warning():
    """A released SPLADE checkpoint is laid out as any BERT MLM: a legitimate start with a fresh score head."""
    from _hub import require_fixtures

    require_fixtures()
    with pytest.warns(UserWarning, match="new weights") as caught:
        t.MonoCE("naver/splade-cocondenser-ensembledistil", device="cpu")
    assert len(caught) == 1


def test_one_half_of_a_splade_pair_is_refused_by_t_load():
    """``t.load('<query half>')`` encoded documents with the query encoder."""
    from _hub import require_fixtures

    require_fixtures()
    query, doc = "naver/efficient-splade-V-large-query", "naver/efficient-splade-V-large-doc"
    for half in (query, doc):
        with pytest.raises(CheckpointError, match=rf"t\.Splade\.from_pretrained\(query='{query}', doc='{doc}'\)$"):
            t.load(half, device="cpu")


def test_splade_takes_a_pair_in_its_constructor():
    from _hub import require_fixtures

    require_fixtures()
    query, doc = "naver/efficient-splade-V-large-query", "naver/efficient-splade-V-large-doc"
    model = t.Splade(query=query, doc=doc, device="cpu")
    assert model.is_pair and model == t.Splade.from_pretrained(query=query, doc=doc, device="cpu")


@pytest.mark.parametrize("cls", ["SparseCE", "MonoCE"])
@pytest.mark.parametrize("damage", [os.urandom(300), b'{"version": "1.0", "model": {"type": "WordPiece"', b"[]", b"{}"],
                         ids=["random-bytes", "cut-json", "wrong-json", "empty-object"])  # fmt: skip
def test_a_damaged_tokenizer_of_a_cross_encoder_is_one_line(folder, damage, cls):
    """``error: added_tokens`` or a bare decode error; now the file is named, as the bi-encoders do."""
    (folder / "tokenizer.json").write_bytes(damage)
    with pytest.raises(CheckpointError, match="tokenizer files .*tokenizer.json.* do not load"):
        getattr(t, cls)(str(folder), device="cpu")


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ.get('SW_PWNED', '/nonexistent/pwned')}",))


#: class -> a start folder it loads through transformers' own from_pretrained
PICKLE_CELLS = {"MonoCE": "bert", "CELI": "bert", "BertBiEncoder": "bert", "Splade": "splade"}


@pytest.mark.parametrize("cls", sorted(PICKLE_CELLS))
def test_a_code_running_pickle_is_one_line_in_the_cli(base_folder, tmp_path, monkeypatch, cls):
    """torch refused it, but the CLI showed a traceback and exit 1."""
    import torch
    from _cli import cli_here
    from transformers import BertForMaskedLM

    folder = tmp_path / "model"
    shutil.copytree(base_folder, folder)
    if PICKLE_CELLS[cls] == "splade":  # an MLM: its config
        from _tiny import bert_config

        BertForMaskedLM(bert_config(30522)).save_pretrained(str(folder))
    monkeypatch.setenv("SW_PWNED", str(tmp_path / "pwned"))
    state = {"evil": _Evil()}
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin holds pickled objects other than tensors"):
        getattr(t, cls)(str(folder), device="cpu")
    if cls == "MonoCE":  # the CLI: one line, exit 2
        (tmp_path / "topics.tsv").write_text("1\thello\n")
        (tmp_path / "run.txt").write_text("1 Q0 d1 1 1.0 x\n")
        (tmp_path / "corpus.jsonl").write_text('{"docno": "d1", "text": "hello world"}\n')
        done = cli_here("rerank", "--model", str(folder), "--topics", str(tmp_path / "topics.tsv"),
                        "--run", str(tmp_path / "run.txt"), "--dataset", str(tmp_path / "corpus.jsonl"),
                        "--output", str(tmp_path / "o"))  # fmt: skip
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "pytorch_model.bin" in done.stderr, done.stderr
    assert not (tmp_path / "pwned").exists()


def test_rerank_with_an_untrained_head_warns_that_its_scores_mean_nothing(tmp_path):
    """``t.MonoCE('minilm').save_pretrained(f)`` then ``rerank --model f`` wrote a run of random scores silently."""
    from _cli import cli_here

    folder = tmp_path / "untrained"
    with pytest.warns(UserWarning, match="new weights"):
        t.MonoCE("minilm", device="cpu").save_pretrained(str(folder))
    (tmp_path / "topics.tsv").write_text("1\thello\n")
    (tmp_path / "run.txt").write_text("1 Q0 d1 1 1.0 x\n")
    (tmp_path / "corpus.jsonl").write_text('{"docno": "d1", "text": "hello world"}\n')
    args = ["rerank", "--topics", str(tmp_path / "topics.tsv"), "--run", str(tmp_path / "run.txt"),
            "--dataset", str(tmp_path / "corpus.jsonl"), "--device", "cpu"]  # fmt: skip
    with pytest.warns(UserWarning, match=r"model card says its score head is untrained .*scores mean nothing"):
        done = cli_here(*args, "--model", str(folder), "--output", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    from pyterrier_tite.models.model_card import update_card

    update_card(folder, {"fresh_weights": False})  # what a training command records
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli_here(*args, "--model", str(folder), "--output", str(tmp_path / "o2")).returncode == 0
    assert not [w for w in caught if "untrained" in str(w.message)]
