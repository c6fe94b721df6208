"""Files other people made (issue 71 items 1, 2, 4, 8, 14): links planted beside a write target, index records that
name paths, packages served by anyone, pickles inside a package. Every cell fails on the code before the fix.

- planted links: a dangling link, a link to a victim file (or folder) and a hard link to a victim file at each side
  file name (the lock, a run's staging file, an index's staging folder, the old copy of an overwrite): the victim
  stays unchanged and nothing is created through a link;
- a legal 250-byte target name is written and built (its side files' names are shortened);
- recorded paths (``..``, absolute, a link inside the index leading out, a malformed hub id) are refused;
- an index queried with other weights than those that encoded it is refused naming both; an index without a
  fingerprint warns once;
- packages served over a local HTTP server: the cache folder follows the umask; two processes fetching one new URL
  both succeed; a tar bomb (size cap from the environment, or the declared size) is refused; link, device and
  escaping members are refused; a cut package is never cached;
- a refused pickle in an index package is one line naming the file, exit 2.
"""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import warnings
from pathlib import Path

import pytest

from pyterrier_tite.store.atomic import atomic_build, write_file

TITE = "webis/tite-2-late-msmarco"
VICTIM_TEXT = "root's precious file\n"


# -- planted links beside a write target ---------------------------------------------------------------------------
def _plant(where: Path, kind: str, victim: Path) -> None:
    if kind == "dangling":
        where.symlink_to(victim.parent / "created-through-link")
    elif kind == "symlink":
        where.symlink_to(victim)
    else:
        os.link(victim, where)


def _victim_intact(victim: Path) -> None:
    if victim.is_dir():
        assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"], "a file was written into the victim folder"
        assert (victim / "keep.txt").read_text() == VICTIM_TEXT
    else:
        assert victim.read_text() == VICTIM_TEXT, "the victim file was changed through a planted link"
    assert not (victim.parent / "created-through-link").exists(), "a file was created through a dangling link"


def _write_run(target: Path) -> None:
    write_file(target, b"1 Q0 d1 1 1.0 sys\n", "run file")


def _build(target: Path, overwrite: bool = False) -> None:
    with atomic_build(target, overwrite=overwrite) as staging:
        staging.mkdir(exist_ok=True)
        (staging / "data").write_text("built\n")


SIDES = {  # side file name of a target, what writes it, whether the victim is a folder
    "lock": (lambda t: f".{t.name}.lock", _write_run, False),
    "staging-file": (lambda t: f".{t.name}.writing-{os.getpid()}", _write_run, False),
    "staging-folder": (lambda t: f".{t.name}.building-{os.getpid()}", _build, True),
    "replaced-folder": (lambda t: f".{t.name}.replaced-{os.getpid()}", lambda t: _build(t, overwrite=True), True),
}
PLANTED = [(side, kind) for side in SIDES for kind in ("dangling", "symlink", "hardlink") if not
           (SIDES[side][2] and kind == "hardlink")]  # fmt: skip


@pytest.mark.parametrize(("side", "kind"), PLANTED)
def test_a_planted_link_beside_a_target_is_never_followed(tmp_path, side, kind):
    victims = tmp_path / "victims"
    victims.mkdir()
    name_of, write, folder = SIDES[side]
    if folder:
        victim = victims / "victim-folder"
        victim.mkdir()
        (victim / "keep.txt").write_text(VICTIM_TEXT)
    else:
        victim = victims / "victim.txt"
        victim.write_text(VICTIM_TEXT)
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / ("index" if folder else "run.txt")
    if side == "replaced-folder":
        _build(target)
    _plant(shared / name_of(target), kind, victim)
    try:
        write(target)
        written = True
    except OSError as exc:  # a refusal is fine when it names the planted file and changes nothing
        assert name_of(target) in str(exc), exc
        written = False
    _victim_intact(victim)
    if written:
        assert not target.is_symlink()
        assert (target / "data").read_text() == "built\n" if folder else target.read_bytes().startswith(b"1 Q0")
    if side != "lock":  # a staging name is ours to take over (a link there is removed by name, never followed)
        assert written, f"the write of {target} failed over a planted {kind} at its {side}"


@pytest.mark.parametrize("what", ["run-file", "index-folder"])
def test_a_250_byte_target_name_is_written(tmp_path, what):
    target = tmp_path / ("r" * 250)
    if what == "run-file":
        _write_run(target)
        assert target.read_bytes().startswith(b"1 Q0")
    else:
        _build(target)
        assert (target / "data").is_file()
    assert all(len(name.encode()) <= 255 for name in os.listdir(tmp_path))
    assert os.listdir(tmp_path) == [target.name]  # no side file left behind


# -- recorded paths of an index ------------------------------------------------------------------------------------
def _model_folder(where: Path) -> Path:
    where.mkdir(parents=True)
    (where / "pt_meta.json").write_text('{"type": "model", "format": "tite"}')
    return where


RECORDS = {
    "packaged-dotdot": lambda idx, outside: {"packaged_model": "../../outside-model"},
    "packaged-absolute": lambda idx, outside: {"packaged_model": str(outside)},
    "model-absolute": lambda idx, outside: {"model": str(outside)},
    "model-dotdot": lambda idx, outside: {"model": "../outside-model"},
    "packaged-link-out": lambda idx, outside: {"packaged_model": "model", "_link": True},
    "bad-hub-id": lambda idx, outside: {"model": None, "hub_id": "../outside-model"},
}


@pytest.mark.parametrize("case", list(RECORDS))
def test_a_recorded_path_leading_outside_the_index_is_refused(tmp_path, case):
    from pyterrier_tite.store.index_info import model_for_index

    outside = _model_folder(tmp_path / "outside-model")
    index = tmp_path / "downloads" / "idx"
    index.mkdir(parents=True)
    record = {"kind": "dense", "model": "model", **RECORDS[case](index, outside)}
    if record.pop("_link", False):
        (index / "model").symlink_to(outside)
    (index / "pyterrier_tite_index.json").write_text(json.dumps(record))
    try:
        found = model_for_index(index, record)
    except (ValueError, OSError) as refused:
        message = str(refused)
        assert "outside" in message or "absolute" in message or "hub id" in message, message
        return
    pytest.fail(f"the record {record} was followed to {found}: a model outside the index")


def test_the_cli_refuses_a_recorded_absolute_model_in_one_line(tmp_path):
    from _cli import cli_here
    from test_cli_batch import TOPICS

    outside = _model_folder(tmp_path / "outside-model")
    index = tmp_path / "idx"
    index.mkdir()
    (index / "pyterrier_tite_index.json").write_text(json.dumps({"kind": "dense", "model": str(outside)}))
    topics = tmp_path / "topics.tsv"
    topics.write_text(TOPICS, encoding="utf-8")
    done = cli_here("retrieve", "--index", str(index), "--topics", str(topics), "--output", str(tmp_path / "r.run"))
    assert done.returncode == 2 and "absolute path" in done.stderr and done.stderr.count("\n") == 1, done.stderr


# -- the model that encoded an index -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fingerprinted(tmp_path_factory):
    """An index built from a saved TITE (``a``), and a same-shaped TITE with other weights (``b``)."""
    import torch
    from test_cli_batch import DOCS

    import pyterrier_tite as t
    from pyterrier_tite.cli.service import build_index

    root = tmp_path_factory.mktemp("fingerprint")
    model = t.load(TITE, device="cpu")
    model.save_pretrained(str(root / "tite-a"))
    with torch.no_grad():
        next(model.model.parameters()).add_(0.01)  # the same shape, other weights: another ranking
    model.save_pretrained(str(root / "tite-b"))
    docs = [{"docno": str(d["docno"]), "text": d["text"]} for d in DOCS]
    build_index(str(root / "tite-a"), docs, root / "a.index", corpus_name="c", device="cpu", batch_size=4,
                verbose=False)  # fmt: skip
    return root


@pytest.mark.usefixtures("single_thread")
def test_an_index_queried_with_other_weights_is_refused_naming_both(fingerprinted):
    from pyterrier_tite.cli.service import index_retriever

    with pytest.raises(ValueError) as refused:
        index_retriever(fingerprinted / "a.index", str(fingerprinted / "tite-b"), 3, device="cpu")
    assert "tite-a" in str(refused.value) and "tite-b" in str(refused.value)
    assert index_retriever(fingerprinted / "a.index", str(fingerprinted / "tite-a"), 3, device="cpu") is not None


@pytest.mark.usefixtures("single_thread")
def test_an_index_without_a_fingerprint_warns_once(fingerprinted, tmp_path):
    from pyterrier_tite.cli.service import index_retriever

    index = tmp_path / "old.index"
    shutil.copytree(fingerprinted / "a.index", index)
    info_file = index / "pyterrier_tite_index.json"
    info = json.loads(info_file.read_text())
    info.pop("model_fingerprint", None)
    info_file.write_text(json.dumps(info))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            index_retriever(index, None, 3, device="cpu")
    assert len([w for w in caught if "fingerprint" in str(w.message)]) == 1


# -- packages from a server ----------------------------------------------------------------------------------------
@pytest.fixture
def served(tmp_path, monkeypatch):
    """``(folder, base url)`` of a local HTTP server (each request waits 0.3 s, so fetches overlap); PyTerrier's
    artifact cache inside the test's folder."""
    root = tmp_path / "served"
    root.mkdir()
    monkeypatch.setenv("PYTERRIER_HOME", str(tmp_path / "pyterrier_home"))

    class Slow(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            time.sleep(0.3)
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Slow, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> tuple:
    return name, data, kind, link


def _package(path: Path, members: list[tuple], declared: dict | None = None, cut: int | None = None) -> None:
    """A tar (``.tar.lz4`` when ``path`` says so) of ``members``; ``declared``: its ``.json``; ``cut``: keep only
    the first ``cut`` bytes (of the compressed file)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data, kind, link in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            if kind == tarfile.CHRTYPE:
                info.devmajor, info.devminor = 1, 3
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    raw = buffer.getvalue()
    if path.name.endswith(".lz4"):
        import lz4.frame

        raw = lz4.frame.compress(raw)
    path.write_bytes(raw[:cut] if cut else raw)
    if declared is not None:
        Path(f"{path}.json").write_text(json.dumps(declared))


INDEX_FILES = [_member("pt_meta.json", b'{"type": "dense_index", "format": "flex"}'), _member("data/vecs", b"v" * 4096)]


def _fetch(url: str) -> str:
    from pyterrier_tite.store.downloads import index_folder

    return index_folder(url)


def _cached(tmp_path: Path) -> list[str]:
    cache = tmp_path / "pyterrier_home" / "artifacts"
    return sorted(p.name for p in cache.iterdir() if p.is_dir()) if cache.is_dir() else []  # staging folders too


def test_the_cache_folder_follows_the_umask(tmp_path, served):
    root, url = served
    _package(root / "a.tar.lz4", INDEX_FILES)
    old = os.umask(0o022)
    try:
        folder = Path(_fetch(f"{url}/a.tar.lz4"))
    finally:
        os.umask(old)
    assert (folder / "data" / "vecs").read_bytes() == b"v" * 4096
    assert folder.stat().st_mode & 0o777 == 0o755, oct(folder.stat().st_mode)
    assert all(p.stat().st_mode & 0o022 == 0 for p in folder.rglob("*"))


def test_two_processes_fetching_one_new_url_both_succeed(tmp_path, served):
    root, url = served
    _package(root / "big.tar.lz4", [*INDEX_FILES, *(_member(f"part{i}", os.urandom(1 << 20)) for i in range(6))])
    code = "import sys; from pyterrier_tite.store.downloads import index_folder; print(index_folder(sys.argv[1]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    procs = [subprocess.Popen([sys.executable, "-c", code, f"{url}/big.tar.lz4"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in results]
    folders = {out.strip().splitlines()[-1] for out, _ in results}
    assert len(folders) == 1 and len(_cached(tmp_path)) == 1


BAD_PACKAGES = {  # name: (members, declared, environment, what the error says)
    "tar-bomb-over-the-cap": ([*INDEX_FILES, _member("zeros", bytes(8 << 20))], None,
                              {"PYTERRIER_TITE_MAX_PACKAGE_BYTES": str(1 << 20)}, "PYTERRIER_TITE_MAX_PACKAGE_BYTES"),
    "more-than-declared": ([*INDEX_FILES, _member("zeros", bytes(8 << 20))], {"total_size": 5000}, {}, "declares"),
    "bomb-without-a-size-record": ([*INDEX_FILES, _member("zeros", bytes(8 << 20))], None,  # 8 MiB from 33 kB
                                   {"PYTERRIER_TITE_MAX_PACKAGE_RATIO": "2"}, "PYTERRIER_TITE_MAX_PACKAGE_RATIO"),
    "symlink-member": ([*INDEX_FILES, _member("model", kind=tarfile.SYMTYPE, link="/etc")], None, {}, "link"),
    "hardlink-member": ([*INDEX_FILES, _member("pw", kind=tarfile.LNKTYPE, link="/etc/passwd")], None, {}, "link"),
    "device-member": ([*INDEX_FILES, _member("null", kind=tarfile.CHRTYPE)], None, {}, "device"),
    "escaping-member": ([*INDEX_FILES, _member("../../escaped.txt", b"x")], None, {}, "outside"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_PACKAGES))
def test_a_hostile_package_is_refused_and_not_cached(tmp_path, served, monkeypatch, case):
    root, url = served
    members, declared, env, says = BAD_PACKAGES[case]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    _package(root / "bad.tar.lz4", members, declared)
    with pytest.raises(ValueError, match=says):
        _fetch(f"{url}/bad.tar.lz4")
    assert _cached(tmp_path) == []
    assert not (tmp_path / "escaped.txt").exists() and not (root / "escaped.txt").exists()


@pytest.mark.parametrize("name", ["cut.tar", "cut.tar.lz4"])
def test_a_cut_package_is_never_cached(tmp_path, served, name):
    root, url = served
    whole = root / "whole.tar"
    _package(whole, INDEX_FILES)
    cut_at = 3 * 512 if name == "cut.tar" else None  # the first member (header + data): cut at a member boundary
    if cut_at is None:
        _package(root / "whole.tar.lz4", INDEX_FILES)
        cut_at = (root / "whole.tar.lz4").stat().st_size - 20
    _package(root / name, INDEX_FILES, cut=cut_at)
    with pytest.raises(ValueError):
        _fetch(f"{url}/{name}")
    assert _cached(tmp_path) == []
    shutil.copyfile(root / ("whole.tar" if name == "cut.tar" else "whole.tar.lz4"), root / name)  # the full one
    assert (Path(_fetch(f"{url}/{name}")) / "data" / "vecs").is_file()  # fetched again, not taken from a cut cache


# -- a refused pickle ----------------------------------------------------------------------------------------------
class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ.get('SW_PWNED', '/nonexistent/pwned')}",))


@pytest.mark.usefixtures("single_thread")
def test_a_refused_pickle_in_an_index_package_is_one_line(tmp_path, monkeypatch):
    import torch
    from _cli import cli_here
    from test_cli_batch import TOPICS

    import pyterrier_tite as t

    index = tmp_path / "idx"
    model = index / "model"
    t.load(TITE, device="cpu").save_pretrained(str(model))
    state = dict.fromkeys(["evil"], None)
    monkeypatch.setenv("SW_PWNED", str(tmp_path / "pwned"))
    state["evil"] = _Evil()
    for weights in model.glob("*.safetensors"):
        weights.unlink()
    torch.save(state, model / "pytorch_model.bin")
    (index / "pyterrier_tite_index.json").write_text(json.dumps({"kind": "dense", "model": "model",
                                                                 "packaged_model": "model"}))  # fmt: skip
    topics = tmp_path / "topics.tsv"
    topics.write_text(TOPICS, encoding="utf-8")
    done = cli_here("retrieve", "--index", str(index), "--topics", str(topics), "--output", str(tmp_path / "r.run"))
    assert done.returncode == 2, done.stderr
    assert "pytorch_model.bin" in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "pwned").exists()


@pytest.mark.usefixtures("single_thread")
def test_a_model_fetched_by_pyterriers_own_from_url_is_not_left_writable_by_all(fingerprinted, tmp_path, served):
    """``pt.Artifact.from_url`` (PyTerrier's code) leaves its folder 0777; loading the model repairs it."""
    import pyterrier as pt
    import pyterrier_alpha as pta

    root, url = served
    pta.Artifact(str(fingerprinted / "tite-a")).build_package(str(root / "m.tar.lz4"), verbose=False)
    old = os.umask(0o022)
    try:
        model = pt.Artifact.from_url(f"{url}/m.tar.lz4")
    finally:
        os.umask(old)
    assert Path(model.path).stat().st_mode & 0o777 == 0o755, oct(Path(model.path).stat().st_mode)
