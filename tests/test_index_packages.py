"""An index built by ``pyterrier-tite index`` brings the model it needs: a hub id is recorded (with ``hub_id``), a
model from a folder is kept inside the index (``model/``), so the index folder moved elsewhere, or packaged, served
over HTTP and opened by URL (``retrieve --index http://.../index.tar.lz4``, the path of ``from_hf``), retrieves the
same run after the model folder is gone. Offline: a local ``http.server``."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
from pathlib import Path

import pyterrier as pt
import pytest
from _hub import require_fixtures
from test_cli_batch import DOCS, TOPICS, cli_here, run_lines

from pyterrier_tite.cli.service import build_index

pytestmark = pytest.mark.usefixtures("single_thread")

TITE = "webis/tite-2-late-msmarco"
SPLADE = "naver/splade-cocondenser-ensembledistil"


@pytest.fixture
def served(tmp_path, monkeypatch):
    """``(folder, base url)`` of a local HTTP server; PyTerrier's artifact cache inside the test's folder."""
    root = tmp_path / "served"
    root.mkdir()
    monkeypatch.setenv("PYTERRIER_HOME", str(tmp_path / "pyterrier_home"))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def saved_model(name: str, folder: Path) -> Path:
    """A model saved to a folder of its own, as a training command leaves one."""
    import pyterrier_tite as t

    require_fixtures()
    t.load(name, device="cpu").save_pretrained(str(folder))
    return folder


def index_with(model: str, index: Path) -> dict:
    require_fixtures()
    docs = [{"docno": str(d["docno"]), "text": d["text"]} for d in DOCS]
    build_index(model, docs, index, corpus_name="corpus", device="cpu", batch_size=4, verbose=False)
    return json.loads((index / "pyterrier_tite_index.json").read_text(encoding="utf-8"))


def retrieve(index: str, topics: Path, out: Path, *extra: str) -> list[list[str]]:
    done = cli_here("retrieve", "--index", index, "--topics", str(topics), "--output", str(out), "-k", "4", "--quiet",
                    *extra)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return run_lines(out)


def test_a_dense_index_package_served_over_http_retrieves_without_the_model_folder(tmp_path, served):
    root, url = served
    topics = tmp_path / "topics.tsv"
    topics.write_text(TOPICS, encoding="utf-8")
    model = saved_model(TITE, tmp_path / "my-tite")
    index = tmp_path / "my.index"
    info = index_with(str(model), index)
    assert info["model"] == "model" and info["packaged_model"] == "model" and info["hub_id"] is None
    assert info["model_name"] == "my-tite" and info["model_fingerprint"].startswith("sha256:")  # never the abs path
    assert (index / "model" / "pt_meta.json").is_file()
    before = retrieve(str(index), topics, tmp_path / "before.run")

    package = pt.Artifact.load(str(index)).build_package(str(root / "index.tar.lz4"), verbose=False)
    assert Path(package).is_file()
    shutil.rmtree(model)
    shutil.rmtree(index)
    after = retrieve(f"{url}/index.tar.lz4", topics, tmp_path / "after.run")
    assert after == before and {line[5] for line in after} == {"pyterrier-tite.my-tite"}
    cached = [p for p in (tmp_path / "pyterrier_home" / "artifacts").iterdir() if p.is_dir()]
    assert len(cached) == 1 and (cached[0] / "model" / "pt_meta.json").is_file()  # downloaded with its model


def test_a_splade_index_moved_elsewhere_keeps_its_model(tmp_path):
    topics = tmp_path / "topics.tsv"
    topics.write_text(TOPICS, encoding="utf-8")
    model = saved_model(SPLADE, tmp_path / "my-splade")
    index = tmp_path / "here" / "splade.index"
    assert index_with(str(model), index)["packaged_model"] == "model"
    before = retrieve(str(index), topics, tmp_path / "before.run")
    moved = tmp_path / "there" / "splade.index"
    shutil.move(str(index.parent), str(moved.parent))
    shutil.rmtree(model)
    assert retrieve(str(moved), topics, tmp_path / "after.run") == before


def test_a_hub_id_is_recorded_not_copied(tmp_path):
    info = index_with(TITE, tmp_path / "hub.index")
    assert info["model"] == TITE and info["hub_id"] == TITE and "packaged_model" not in info
    assert not (tmp_path / "hub.index" / "model").exists()


def test_an_index_without_its_model_names_the_missing_folder(tmp_path):
    """An index of an older build (no copy inside) whose model folder is gone: one line telling to pass --model."""
    topics = tmp_path / "topics.tsv"
    topics.write_text(TOPICS, encoding="utf-8")
    model = saved_model(TITE, tmp_path / "gone")
    index = tmp_path / "old.index"
    index_with(str(model), index)
    shutil.rmtree(index / "model")
    info_file = index / "pyterrier_tite_index.json"
    info = json.loads(info_file.read_text(encoding="utf-8"))
    old = {k: v for k, v in info.items() if k not in ("packaged_model", "hub_id")}
    info_file.write_text(json.dumps({**old, "model": str(model)}))  # as older builds recorded a folder
    shutil.rmtree(model)
    done = cli_here("retrieve", "--index", str(index), "--topics", str(topics), "--output", str(tmp_path / "r.run"))
    # refused: the recorded model lies outside the index
    assert done.returncode == 2 and "pass --model" in done.stderr and str(model) in done.stderr
    assert retrieve(str(index), topics, tmp_path / "r.run", "--model", TITE)  # --model still opens it


def test_an_unreachable_index_url_is_one_line(tmp_path, served):
    _, url = served
    topics = tmp_path / "topics.tsv"
    topics.write_text(TOPICS, encoding="utf-8")
    done = cli_here("retrieve", "--index", f"{url}/missing.tar.lz4", "--topics", str(topics), "--output",
                    str(tmp_path / "r.run"))  # fmt: skip
    assert done.returncode == 2 and "cannot download the index" in done.stderr
