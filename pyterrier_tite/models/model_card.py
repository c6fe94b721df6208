"""Model cards: the ``README.md`` every saved model folder gets, rendered from its ``pt_meta.json``.

The card has Hugging Face front matter (``license`` of the start model where one is known, ``tags``, ``base_model``,
``library_name``, ``pipeline_tag``) and a body: what the model is, how to use it in PyTerrier, its settings, and the
training command, data and evaluation table when a caller recorded them (:func:`write_model_card`). What the card says
besides the settings lives in ``pt_meta.json`` under ``"card"``, so every later save or package renders the same card.

A ``README.md`` we did not write (no :data:`MARKER` line) is never overwritten: delete the marker line to keep your own
edits. Needs no PyTerrier, so the GPU scripts write the same cards."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable

from pyterrier_tite.families import BY_FORMAT, RERANKERS, kind_of
from pyterrier_tite.models.meta_files import PT_META, read_meta

CARD_FILE = "README.md"
PYPI = "https://pypi.org/project/pyterrier-tite/"
#: the line that marks a card as ours (rewritten on every save); a README.md without it is the user's and is kept
MARKER = "<!-- pyterrier-tite model card: rewritten on every save; delete this line to keep your own edits -->"
#: what ``pt_meta.json`` holds besides the settings: the artifact fields and the card
NOT_SETTINGS = ("type", "format", "package_hint", "card")

#: licenses of start models we know (hub id prefix -> license); others come from a folder's own card or README
KNOWN_LICENSES = {
    "naver/splade": "cc-by-nc-sa-4.0",  # naver's SPLADE releases: non-commercial
    "naver/efficient-splade-": "cc-by-nc-sa-4.0",
    "sentence-transformers/all-MiniLM-L6-v2": "apache-2.0",
    "google-bert/bert-base-uncased": "apache-2.0",
    "bert-base-uncased": "apache-2.0",
}
#: shipped start points (:mod:`pyterrier_tite.start_points`) -> the hub model they package
SHIPPED_HUB_IDS = {"minilm": "sentence-transformers/all-MiniLM-L6-v2"}

#: transformer class of each family (``families.py``; cross-encoders: the reranker class) -> family tag, class, what
#: it is, pipeline tag
CARDS = {
    "TITE": (
        "tite",
        "TITE",
        "a bi-encoder whose transformer pools tokens inside its layers, so each text becomes one "
        "vector early and cheaply; scored by dot product",
        "feature-extraction",
    ),
    "BertBiEncoder": (
        "bert-biencoder",
        "BertBiEncoder",
        "a dense bi-encoder over a BERT-like encoder ([CLS] or mean "
        "pooling), one vector per text, scored by dot product",
        "feature-extraction",
    ),
    "Aggretriever": (
        "aggretriever",
        "Aggretriever",
        "a bi-encoder whose one vector per text joins a projected [CLS] "
        "vector and aggregated MLM term weights, scored by dot product",
        "feature-extraction",
    ),
    "Splade": (
        "splade",
        "Splade",
        "sparse term weights over the vocabulary (SPLADE), indexed with PISA and scored by their dot product",
        "feature-extraction",
    ),
    "SparseCE": (
        "sparse-cross-encoder",
        "SparseCE",
        "a sparse cross-encoder re-ranker, query and document in one transformer with windowed document attention",
        "text-ranking",
    ),
    "MonoCE": (
        "cross-encoder",
        "MonoCE",
        "a cross-encoder re-ranker with full attention over query and document (monoBERT)",
        "text-ranking",
    ),
    "CELI": (
        "celi",
        "CELI",
        "a re-ranker that adds late interaction over a cross-encoder's token vectors to its [CLS] score",
        "text-ranking",
    ),
}
#: how each family is used once loaded (``model`` is the loaded transformer)
USAGE = {
    "dense": "index = pyterrier_dr.FlexIndex('vaswani.flex')\n"
    "(model >> index).index(t.datasets.get_dataset('vaswani').get_corpus_iter())\n"
    "retriever = model.query_encoder() >> index.np_retriever()",
    "splade": "model.indexer('vaswani.splade').index(t.datasets.get_dataset('vaswani').get_corpus_iter())\n"
    "retriever = model.retriever('vaswani.splade') % 10",
    "rerank": "dataset = t.datasets.get_dataset('vaswani')\n"
    "pipeline = t.bm25('vaswani') % 100 >> dataset.text_loader() >> model",
}


def family(meta: dict) -> tuple[str, str, str, str]:
    """(family tag, class name, description, pipeline tag) of a model's ``pt_meta.json``."""
    fmt = meta.get("format")
    if not isinstance(fmt, str) or fmt not in BY_FORMAT:
        raise ValueError(f"no model card for format {fmt!r}")
    public = BY_FORMAT[fmt].public
    key = meta.get("reranker", "MonoCE") if public == RERANKERS else public[0]
    if key not in public:
        raise ValueError(f"no model card for format {fmt!r} with reranker {key!r}")
    return CARDS[key]


# ------------------------------------------------------------------------------------------------- where from
def hub_id(name: str | os.PathLike | None) -> str | None:
    """The Hugging Face hub id a model name or folder stands for: the id itself, a snapshot folder of the hub cache
    (``.../models--org--name/snapshots/<sha>``) or a shipped start point; None for other folders."""
    if name is None:
        return None
    name = os.fspath(name)
    if name in SHIPPED_HUB_IDS:
        return SHIPPED_HUB_IDS[name]
    cached = re.search(r"models--([^/\\]+?)--([^/\\]+)[/\\]snapshots[/\\]", name + os.sep)
    if cached:
        return f"{cached.group(1)}/{cached.group(2)}"
    if os.path.isdir(name):
        from pyterrier_tite.start_points import SHIPPED

        for short, (_package, locate) in SHIPPED.items():
            path = locate()
            if short in SHIPPED_HUB_IDS and path and os.path.realpath(path) == os.path.realpath(name):
                return SHIPPED_HUB_IDS[short]
        return None
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        return name
    return None


def known_license(repo: str | None) -> str | None:
    """The license of a hub model in :data:`KNOWN_LICENSES` (the first key its id starts with)."""
    return next((value for key, value in KNOWN_LICENSES.items() if repo and repo.startswith(key)), None)


def front_matter(text: str) -> dict:
    """The YAML front matter of a card (``{}`` when there is none or it does not parse)."""
    match = re.match(r"---\s*\n(.*?)\n---\s*(\n|$)", text, re.S)
    if not match:
        return {}
    try:
        import yaml

        value = yaml.safe_load(match.group(1))
    except Exception:  # a malformed card of someone else's: no facts from it
        return {}
    return value if isinstance(value, dict) else {}


def origin_info(names: Iterable[str | os.PathLike | None]) -> dict:
    """``base_model`` and ``license`` of a model started from ``names`` (hub ids or folders, first known wins): a
    hub id is the base; a folder saved by us passes on its card's base and license; any folder's README front matter
    gives its license."""
    bases: list[str] = []
    license_ = None
    for name in names:
        if name is None:
            continue
        repo = hub_id(name)
        folder = os.fspath(name) if os.path.isdir(os.fspath(name)) else None
        card = (read_meta(folder).get("card") or {}) if folder else {}
        readme = os.path.join(folder, CARD_FILE) if folder else None
        theirs = front_matter(open(readme, encoding="utf-8").read()) if readme and os.path.isfile(readme) else {}
        base = repo or card.get("base_model")
        for b in base if isinstance(base, list) else [base]:
            if b and b not in bases:
                bases.append(b)
        license_ = license_ or known_license(repo) or card.get("license") or theirs.get("license")
    info: dict = {}
    if bases:
        info["base_model"] = bases[0] if len(bases) == 1 else bases
    if license_:
        info["license"] = license_
    return info


# ---------------------------------------------------------------------------------------------------- reading
def is_ours(readme: str | os.PathLike) -> bool:
    """Whether a README.md is a card this package wrote (carries :data:`MARKER`)."""
    with open(readme, encoding="utf-8", errors="replace") as f:
        return MARKER in f.read()


# -------------------------------------------------------------------------------------------------- rendering
def render_card(meta: dict, *, repo: str | None = None, dataset: bool = False, pretty_name: str | None = None) -> str:
    """The card of a model from its ``pt_meta.json`` (``meta``). ``repo``: where it is shared (``org/name``; a
    placeholder otherwise). ``dataset``: the card of a PyTerrier artifact package (``model.to_hf(repo)`` uploads a
    dataset repo loaded by ``pt.Artifact.from_hf``) rather than of a model repo (the folder, loaded by ``t.load``)."""
    tag, cls, description, pipeline_tag = family(meta)
    card = meta.get("card") or {}
    fmt = meta["format"]
    where = repo or "<org>/<name>"
    matter: dict = {}
    if dataset and (pretty_name or repo):
        matter["pretty_name"] = pretty_name or repo.split("/")[-1].split("@")[0]
    if card.get("license"):
        matter["license"] = card["license"]
    if not dataset:
        matter.update({"library_name": "pyterrier-tite", "pipeline_tag": pipeline_tag})
        if card.get("base_model"):
            matter["base_model"] = card["base_model"]
    matter["tags"] = ["pyterrier", "pyterrier-artifact", "pyterrier-artifact.model", f"pyterrier-artifact.model.{fmt}",
                      tag]  # fmt: skip
    if dataset:
        matter.update({"task_categories": ["text-retrieval"], "viewer": False})
    lines = ["---", *_yaml(matter), "---", *([] if dataset else [MARKER]), "", f"# {pretty_name or repo or cls}", ""]
    lines.append(f"A `{cls}` of [pyterrier-tite]({PYPI}) for PyTerrier: {description}.")
    bases = card.get("base_model")
    if bases:
        links = ", ".join(f"[{b}](https://huggingface.co/{b})" for b in (bases if isinstance(bases, list) else [bases]))
        lines.append(f"Started from {links}.")
    lines += ["", "## Usage", "", "```python", "import pyterrier as pt"]
    kind = kind_of(fmt)
    if kind == "dense":
        lines.append("import pyterrier_dr")
    lines.append("import pyterrier_tite as t  # pip install pyterrier-tite")
    lines.append("")
    from_hf = f"model = pt.Artifact.from_hf({where!r})  # the package model.to_hf({where!r}) uploads"
    from_repo = f"model = t.load({where!r})  # this folder as a Hugging Face model repo (or a local folder)"
    lines += [from_hf] if dataset else [from_repo, "# " + from_hf]
    lines += [USAGE[kind], "```", ""]
    lines += ["Share it as a PyTerrier artifact with `model.to_hf('org/name')` (or `model.build_package(path)`, "
              "`model.to_zenodo()`); `pt.Artifact.from_hf('org/name')` loads it back.", ""]  # fmt: skip
    settings = {k: v for k, v in meta.items() if k not in NOT_SETTINGS}
    if settings:
        lines += ["## Settings", "", "| setting | value |", "|---|---|"]
        lines += [f"| {k} | `{json.dumps(v)}` |" for k, v in settings.items()]
        lines.append("")
    lines += _training(card.get("training")) + _evaluation(card.get("evaluation"))
    lines += ["## Metadata", "", "```json", json.dumps({k: meta[k] for k in ("type", "format", "package_hint")
                                                        if k in meta}, indent=1), "```", ""]  # fmt: skip
    return "\n".join(lines)


def _training(training) -> list[str]:
    if not training:
        return []
    training = training if isinstance(training, dict) else {"command": str(training)}
    lines = ["## Training", ""]
    if training.get("command"):
        lines += ["```bash", str(training["command"]), "```", ""]
    data = training.get("data")
    if data:
        lines += ["Data: " + ", ".join(f"`{d}`" for d in (data if isinstance(data, list) else [data])), ""]
    lines += [f"- {k}: `{json.dumps(v)}`" for k, v in training.items() if k not in ("command", "data")]
    return [*lines, ""]


def _evaluation(evaluation) -> list[str]:
    """``{system or collection: {measure: value}}`` as a markdown table."""
    if not evaluation:
        return []
    measures = list(dict.fromkeys(m for row in evaluation.values() for m in row))
    lines = ["## Evaluation", "", "| | " + " | ".join(measures) + " |", "|---" * (len(measures) + 1) + "|"]
    for name, row in evaluation.items():
        cells = [_number(row.get(m)) for m in measures]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _number(value) -> str:
    if value is None:
        return ""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _yaml(matter: dict) -> list[str]:
    """Front matter lines: plain scalars where YAML reads them back as the same string, JSON strings otherwise."""

    def scalar(value) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        text = str(value)
        keyword = text.lower() in ("true", "false", "null", "yes", "no", "on", "off")
        return text if re.fullmatch(r"[A-Za-z][A-Za-z0-9._/-]*", text) and not keyword else json.dumps(text)

    lines = []
    for key, value in matter.items():
        if isinstance(value, list):
            lines += [f"{key}:"] + [f"- {scalar(v)}" for v in value]
        else:
            lines.append(f"{key}: {scalar(value)}")
    return lines


# ---------------------------------------------------------------------------------------------------- writing
def write_card(folder: str | os.PathLike, meta: dict | None = None) -> bool:
    """Writes ``README.md`` of a model folder from its ``pt_meta.json`` (or ``meta``); False, writing nothing, when
    the folder has a README.md that is not ours (:data:`MARKER`) or its format has no card."""
    folder = os.fspath(folder)
    meta = read_meta(folder) if meta is None else meta
    readme = os.path.join(folder, CARD_FILE)
    if os.path.isfile(readme) and not is_ours(readme):
        return False
    try:
        text = render_card(meta)
    except ValueError:  # not a model format of ours: no card
        return False
    with open(readme, "w", encoding="utf-8") as f:
        f.write(text)
    return True


def update_card(folder: str | os.PathLike, info: dict) -> dict:
    """Merges ``info`` (``base_model``, ``license``, ``training``, ``evaluation``; None values ignored) into the
    card of ``pt_meta.json`` and rewrites the README.md (:func:`write_card`); returns the card."""
    folder = os.fspath(folder)
    meta = read_meta(folder)
    if not meta:
        raise FileNotFoundError(f"{folder} has no {PT_META}: not a model folder saved by pyterrier-tite")
    card = {**(meta.get("card") or {}), **{k: v for k, v in info.items() if v is not None}}
    meta["card"] = card
    with open(os.path.join(folder, PT_META), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
    write_card(folder, meta)
    return card


def write_model_card(
    folder: str | os.PathLike,
    *,
    training_command: str | None = None,
    training_data: str | list[str] | None = None,
    evaluation: dict[str, dict[str, float]] | None = None,
    base_model: str | list[str] | None = None,
    license: str | None = None,
    **training,
) -> dict:
    """Records what the card of a saved model should say and rewrites it: the training command and data (more
    training facts as keywords, e.g. ``steps=10000``), an evaluation table (``{collection or system: {measure:
    value}}``), the base model and license (default: what the save found). Returns the card.

    Example::

        model.save_pretrained('runs/splade')
        write_model_card('runs/splade', training_command='pyterrier-tite train-splade ...',
                         training_data='msmarco-passage/train/triples-small',
                         evaluation={'msmarco-passage/dev/small': {'RR@10': 0.331}})
    """
    run = {"command": training_command, "data": training_data, **training}
    run = {k: v for k, v in run.items() if v is not None}
    info = {"base_model": base_model, "license": license, "evaluation": evaluation}
    if run:
        info["training"] = {**(read_meta(folder).get("card") or {}).get("training", {}), **run}
    return update_card(folder, info)
