"""Every model kind is a PyTerrier artifact that survives the way the ecosystem shares one: ``build_package`` ->
served over HTTP -> ``pt.Artifact.from_url`` (download, extract into the artifact cache, load), the path
``pt.Artifact.from_hf`` takes; ``to_hf`` -> ``from_hf`` with the hub replaced by a local server. The transformer that
comes back computes bit for bit what the packaged one computes (tiny hub fixtures, offline)."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import yaml
from _hub import require_fixtures

import pyterrier_tite as t

pytestmark = pytest.mark.usefixtures("single_thread")

QUERIES = pd.DataFrame({"qid": ["1", "2"], "query": ["what is sparse retrieval", "neural ranking of documents"]})
TEXTS = ["sparse retrieval uses an inverted index", "a zebra", "rank documents with a model"]
DOCS = pd.DataFrame({"docno": ["a", "b", "c"], "text": TEXTS})
RESULTS = QUERIES.merge(DOCS, how="cross")


def models() -> dict:
    """One model of every kind (the hub fixtures; new heads where a kind needs one)."""
    query_side = "naver/efficient-splade-V-large-query"
    splade_pair = {"query": query_side, "doc": "naver/efficient-splade-V-large-doc"}
    return {
        "SparseCE": lambda: t.SparseCE.from_pretrained("webis/sparse-cross-encoder-4-4096", query_max_length=12),
        "MonoCE": lambda: t.MonoCE("webis/sparse-cross-encoder-4-4096"),
        "CELI": lambda: t.CELI("webis/sparse-cross-encoder-4-4096", token_dim=8),
        "TITE": lambda: t.TITE.from_pretrained("webis/tite-2-late-msmarco"),
        "TITE+query_model": _tite_with_query_model,
        "BertBiEncoder": lambda: t.BertBiEncoder.from_pretrained(query_side, pooling="mean"),
        "Splade": lambda: t.Splade.from_pretrained("naver/splade-cocondenser-ensembledistil"),
        "Splade pair": lambda: t.Splade.from_pretrained(**splade_pair),
        "Aggretriever": lambda: t.Aggretriever.from_pretrained("castorini/aggretriever-cocondenser"),
    }


def _tite_with_query_model():
    """A distilled TITE: documents by TITE, queries by a BERT bi-encoder of the same width (32)."""
    tite = t.TITE.from_pretrained("webis/tite-2-late-msmarco")
    queries = t.BertBiEncoder.from_pretrained("naver/efficient-splade-V-large-query")
    assert queries.dim == tite.dim
    return t.TITE.from_pretrained("webis/tite-2-late-msmarco", query_model=queries)


def outputs(model) -> list:
    """Everything the model computes on the small inputs: vectors, term weights or scores."""
    if isinstance(model, t.Splade):
        return [model.query_encoder()(QUERIES)["query_toks"].tolist(), model.doc_encoder()(DOCS)["toks"].tolist()]
    if hasattr(model, "encode_queries"):
        return [model.encode_queries(QUERIES["query"].tolist()), model.encode_docs(DOCS["text"].tolist())]
    return [model(RESULTS)["score"].to_numpy()]


def assert_same(a: list, b: list) -> None:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), "outputs differ after the round trip"
        else:
            assert x == y, "sparse weights differ after the round trip"


def build(kind: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MonoCE / CELI on a sparse checkpoint: "new head" warnings are expected
        return models()[kind]()


# --------------------------------------------------------------------------------------------------- the server
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``(folder, base url)``: a local HTTP server on 127.0.0.1 (random port) serving ``folder``."""
    root = tmp_path_factory.mktemp("served")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def pyterrier_home(tmp_path, monkeypatch) -> Path:
    """PyTerrier's home (``PYTERRIER_HOME``; its ``artifacts/`` is the download cache) inside the test's folder."""
    home = tmp_path / "pyterrier_home"
    monkeypatch.setenv("PYTERRIER_HOME", str(home))
    return home


# ---------------------------------------------------------------------------------------------------- round trip
@pytest.mark.parametrize("kind", list(models()))
def test_a_package_served_over_http_loads_back_exactly(kind, server, pyterrier_home, tmp_path):
    require_fixtures()
    root, url = server
    model = build(kind)
    assert isinstance(model, pt.Artifact) and pt.inspect.artifact_type_format(model)[0] == "model"
    name = kind.replace(" ", "_").replace("+", "_") + ".tar.lz4"
    package = model.build_package(str(root / name), verbose=False)
    assert Path(package).is_file() and Path(f"{package}.json").is_file()  # the sha256 from_url checks

    loaded = pt.Artifact.from_url(f"{url}/{name}")
    assert type(loaded) is type(model) and isinstance(loaded, pt.Artifact)
    assert Path(loaded.path).parent == pyterrier_home / "artifacts"  # extracted into the artifact cache
    assert {"pt_meta.json", "README.md"} <= {p.name for p in Path(loaded.path).iterdir()}
    assert_same(outputs(loaded), outputs(model))
    if kind == "TITE+query_model":
        assert loaded.query_model is not None and type(loaded.query_model) is t.BertBiEncoder


def test_a_folder_loaded_as_an_artifact_packages_beside_itself(server, pyterrier_home, tmp_path):
    """``pt.Artifact.load(folder)`` remembers the folder: ``build_package()`` writes ``<folder>.tar.lz4``; the class
    methods (``t.Splade.from_url``) load and check the class."""
    require_fixtures()
    root, url = server
    build("Splade").save_pretrained(str(tmp_path / "splade"))
    model = pt.Artifact.load(str(tmp_path / "splade"))
    assert model.path == tmp_path / "splade" and model.card["license"] == "cc-by-nc-sa-4.0"
    package = model.build_package(verbose=False)
    assert package == str(tmp_path / "splade.tar.lz4")
    shutil.copy(package, root / "beside.tar.lz4")
    shutil.copy(f"{package}.json", root / "beside.tar.lz4.json")
    again = t.Splade.from_url(f"{url}/beside.tar.lz4")
    assert type(again) is t.Splade and again.card == model.card
    assert_same(outputs(again), outputs(model))
    with pytest.raises(TypeError, match="holds a Splade, not a TITE"):
        t.TITE.load(str(tmp_path / "splade"))


def test_a_model_built_in_memory_needs_a_package_path():
    require_fixtures()
    with pytest.raises(ValueError, match="pass build_package"):
        build("TITE").build_package()


def test_to_hf_and_from_hf_round_trip(server, pyterrier_home, tmp_path, monkeypatch):
    """``to_hf`` uploads the package and a dataset card (the hub replaced by the local server: the files land where
    ``from_hf`` resolves ``hf:org/name``), ``pt.Artifact.from_hf`` loads it back exactly."""
    require_fixtures()
    import huggingface_hub
    import pyterrier._artifact as artifact_module

    root, url = server
    uploaded: dict = {}

    def upload_folder(repo_id, folder_path, repo_type, revision):
        target = root / "datasets" / repo_id / "resolve" / revision
        shutil.copytree(folder_path, target)
        uploaded.update(repo=repo_id, kind=repo_type, folder=target)
        return str(target)

    monkeypatch.setattr(huggingface_hub, "create_repo", lambda *a, **k: None)
    monkeypatch.setattr(huggingface_hub, "create_branch", lambda *a, **k: None)
    monkeypatch.setattr(huggingface_hub, "upload_folder", upload_folder)
    monkeypatch.setattr(
        artifact_module, "_hf_url_resolver",
        lambda parsed: f"{url}/datasets/{parsed.path.split('@')[0]}/resolve/main/artifact.tar.lz4",
    )  # fmt: skip
    model = build("SparseCE")
    model.to_hf("me/tiny-sparse-ce")
    assert uploaded["repo"] == "me/tiny-sparse-ce" and uploaded["kind"] == "dataset"

    readme = (uploaded["folder"] / "README.md").read_text()
    matter = yaml.safe_load(readme.split("---")[1])
    assert {"pyterrier", "pyterrier-artifact", "pyterrier-artifact.model.cross-encoder"} <= set(matter["tags"])
    assert matter["viewer"] is False and "t.SparseCE.from_hf('me/tiny-sparse-ce')" in readme  # not pt.Artifact's:
    assert "pt.Artifact.from_hf(" not in readme  # two processes fetching one new package at once fail there

    loaded = pt.Artifact.from_hf("me/tiny-sparse-ce")
    assert type(loaded) is t.SparseCE and loaded.query_max_length == 12  # a keyword override travels too
    assert_same(outputs(loaded), outputs(model))
