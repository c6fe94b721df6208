"""Model cards: the ``README.md`` every saved model folder gets, rendered from its ``pt_meta.json`` (whose ``"card"``
holds what the card says besides the settings, so every later save renders the same card). A ``README.md`` without
the :data:`MARKER` line is the user's and is never overwritten. Needs no PyTerrier, so the GPU scripts write the same
cards."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable

from pyterrier_tite.families import BY_FORMAT, FAMILIES, RERANKERS, kind_of
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
#: a hub id (``org/name``): what a name must be to be fetched from the hub or passed on as ``base_model``
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")

#: the hub's pipeline tag of each kind of model
PIPELINE_TAGS = {"dense": "feature-extraction", "splade": "feature-extraction", "rerank": "text-ranking"}
#: transformer class -> family tag, class, what it is (card text from ``families.py``), pipeline tag
CARDS = {name: (tag, name, text, PIPELINE_TAGS[f.kind]) for f in FAMILIES
         for name, (tag, text) in zip(f.public, f.cards, strict=True)}  # fmt: skip
#: how each family is used once loaded (``model`` is the loaded transformer)
USAGE = {
    "dense": "index = pyterrier_dr.FlexIndex('vaswani.flex')\n"
    "(model >> index).index(t.datasets.get_dataset('vaswani').get_corpus_iter())\n"
    "retriever = model.query_encoder() >> index.np_retriever()",
    "splade": "model.indexer('vaswani.splade').index(t.datasets.get_dataset('vaswani').get_corpus_iter())\n"
    "retriever = (model.retriever('vaswani.splade') % 10).compile()  # .compile(): PISA returns only 10",
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
    """The hub id a model name or folder stands for: the id itself, a hub cache snapshot folder or a shipped start
    point; None for other folders."""
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
    return name if HUB_ID.fullmatch(name) else None


def known_license(repo: str | None) -> str | None:
    """The license of a hub model in :data:`KNOWN_LICENSES` (the first key its id starts with)."""
    return next((value for key, value in KNOWN_LICENSES.items() if repo and repo.startswith(key)), None)


#: the most front matter read from a card we did not write (a larger one gives no facts)
MAX_FRONT_MATTER = 64 * 1024
#: a license we pass on: a short SPDX-like id (``apache-2.0``, ``cc-by-nc-sa-4.0``, ``other``), never an object
LICENSE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}")


def front_matter(text: str) -> dict:
    """The YAML front matter of a card, parsed as data only (``{}`` when there is none, it is larger than
    :data:`MAX_FRONT_MATTER`, does not parse or uses aliases: a kilobyte of nested ones expands to gigabytes)."""
    match = re.match(r"---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|$)", text[: MAX_FRONT_MATTER + 16], re.S)
    if not match or len(match.group(1)) > MAX_FRONT_MATTER:
        return {}
    try:
        import yaml

        if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(match.group(1), Loader=yaml.SafeLoader)):
            return {}
        value = yaml.safe_load(match.group(1))
    except Exception:  # a malformed or hostile card of someone else's: no facts from it
        return {}
    return value if isinstance(value, dict) else {}


def _head(file: str | os.PathLike, size: int) -> str:
    """The first ``size`` characters of a text file someone else may have made (any encoding, any length)."""
    with open(file, encoding="utf-8", errors="replace") as f:
        return f.read(size)


def license_id(value) -> str | None:
    """``value`` when it is a short license id (:data:`LICENSE_ID`), else None (a card's ``license`` may be any YAML
    object)."""
    return value if isinstance(value, str) and LICENSE_ID.fullmatch(value) else None


def base_models(value) -> list[str]:
    """The hub ids of a card's ``base_model`` (a string or a list of up to 8); anything else gives none."""
    values = value if isinstance(value, list) else [value]
    return [v for v in values[:8] if isinstance(v, str) and HUB_ID.fullmatch(v)]


def origin_info(names: Iterable[str | os.PathLike | None]) -> dict:
    """``base_model`` and ``license`` of a model started from ``names`` (hub ids or folders, first known wins): a hub
    id is the base; a folder of ours passes on its card's base and license, any folder's README front matter its
    license (ids only). ``license_from`` names the base the license is inherited from."""
    bases: list[str] = []
    license_ = license_from = None
    for name in names:
        if name is None:
            continue
        repo = hub_id(name)
        folder = os.fspath(name) if os.path.isdir(os.fspath(name)) else None
        card = (read_meta(folder).get("card") or {}) if folder else {}
        card = card if isinstance(card, dict) else {}
        readme = os.path.join(folder, CARD_FILE) if folder else None
        theirs = front_matter(_head(readme, MAX_FRONT_MATTER + 16)) if readme and os.path.isfile(readme) else {}
        found = [repo] if repo else base_models(card.get("base_model"))
        bases = list(dict.fromkeys(bases + found))
        if license_ is None:
            license_ = known_license(repo) or license_id(card.get("license")) or license_id(theirs.get("license"))
            if license_:
                license_from = repo or (found[0] if found else None)
    info = {"base_model": bases[0] if len(bases) == 1 else bases, "license": license_, "license_from": license_from}
    return {k: v for k, v in info.items() if v}  # license_from is set with a license only


def is_ours(readme: str | os.PathLike) -> bool:
    """Whether a README.md is a card this package wrote (carries :data:`MARKER` near its top)."""
    return MARKER in _head(readme, 4 * MAX_FRONT_MATTER)


# -------------------------------------------------------------------------------------------------- rendering
def render_card(meta: dict, *, repo: str | None = None, dataset: bool = False, pretty_name: str | None = None) -> str:
    """The card of a model from its ``pt_meta.json`` (``meta``). ``repo``: where it is shared (``org/name``; a
    placeholder otherwise). ``dataset``: the card of a PyTerrier artifact package (``model.to_hf(repo)``) rather than
    of a model repo (``model.push_to_hub(repo)``). The card may carry facts of a folder someone else made, so every
    value is checked or escaped: license and base models only as ids, text in code spans and fences it cannot close."""
    from huggingface_hub import DatasetCardData, ModelCardData

    tag, cls, description, pipeline_tag = family(meta)
    card = meta.get("card") if isinstance(meta.get("card"), dict) else {}
    fmt = meta["format"]
    where = repo or "<org>/<name>"
    license_ = license_id(card.get("license"))
    bases = base_models(card.get("base_model"))
    kind = kind_of(fmt)
    title = _one_line(pretty_name or repo or cls)
    evaluation = _evaluation_rows(card.get("evaluation"))
    tags = ["pyterrier", "pyterrier-artifact", "pyterrier-artifact.model", f"pyterrier-artifact.model.{fmt}", tag]
    if card.get("fresh_weights"):
        tags.append("untrained")
    if dataset:
        pretty = pretty_name or (repo.split("/")[-1].split("@")[0] if repo else None)
        data = DatasetCardData(pretty_name=_one_line(pretty) if pretty else None, license=license_, tags=tags,
                               task_categories=["text-retrieval"], viewer=False)  # fmt: skip
    else:
        results = _eval_results(evaluation, "text-ranking" if kind == "rerank" else "text-retrieval")
        data = ModelCardData(license=license_, library_name="pyterrier-tite", pipeline_tag=pipeline_tag,
                             base_model=(bases[0] if len(bases) == 1 else bases) or None, tags=tags,
                             model_name=title if results else None, eval_results=results or None)  # fmt: skip
    lines = ["---", data.to_yaml(), "---", *([] if dataset else [MARKER]), "", f"# {title}", ""]
    lines.append(f"A `{cls}` of [pyterrier-tite]({PYPI}) for PyTerrier: {description}.")
    if bases:
        lines.append("Started from " + ", ".join(f"[{b}](https://huggingface.co/{b})" for b in bases) + ".")
    inherited = base_models(card.get("license_from"))
    if license_ and inherited:
        lines.append(f"License `{license_}`: inherited from the base model [{inherited[0]}]"
                     f"(https://huggingface.co/{inherited[0]}); its terms apply to this model too.")  # fmt: skip
    if card.get("fresh_weights"):
        fresh = _code(card["fresh_weights"])
        lines += ["", f"> **Warning: not trained.** Some weights of this model are new (random init: {fresh});"
                  " its scores mean nothing until it is trained."]  # fmt: skip
    lines += ["", "## Usage", "", "```python", "import pyterrier as pt"]
    if kind == "dense":
        lines.append("import pyterrier_dr")
    lines.append("import pyterrier_tite as t  # not on PyPI yet: pip install <a checkout or its git URL>")
    lines.append("")
    if dataset:
        lines.append(f"model = t.{cls}.from_hf({where!r})  # the package model.to_hf({where!r}) uploaded")
    else:
        lines.append(f"model = t.load({where!r})  # the model repo model.push_to_hub({where!r}) uploaded, or a folder")
    lines += [USAGE[kind], "```", ""]
    lines += ["Share a model as a Hugging Face model repo with `model.push_to_hub('org/name')` (`t.load('org/name')` "
              "loads it), or as a PyTerrier artifact package (a dataset repo) with `model.to_hf('org/name')` "
              f"(`t.{cls}.from_hf('org/name')` or `t.{cls}.from_url(url)` loads it, safely when several processes "
              "fetch it at once, which PyTerrier's own `pt.Artifact.from_hf` / `from_url` do not survive; also "
              "`model.build_package(path)`, `model.to_zenodo()`).", ""]  # fmt: skip
    settings = {k: v for k, v in meta.items() if k not in NOT_SETTINGS}
    extra = card.get("settings")
    settings.update({k: v for k, v in (extra.items() if isinstance(extra, dict) else ()) if k not in settings})
    if settings:
        lines += ["## Settings", "", "| setting | value |", "|---|---|"]
        lines += [f"| {_cell(k)} | {_code(json.dumps(v))} |" for k, v in settings.items()]
        lines.append("")
    lines += _training(card.get("training")) + _evaluation(evaluation)
    lines += ["## Metadata", "", "```json", json.dumps({k: meta[k] for k in ("type", "format", "package_hint")
                                                        if k in meta}, indent=1), "```", ""]  # fmt: skip
    return "\n".join(lines)


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def _code(text) -> str:
    """``text`` as one inline code span: delimiters longer than any backtick run inside (CommonMark), one line."""
    text = _one_line(str(text))
    ticks = "`" * (_longest_backtick_run(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _fence(text, language: str = "") -> list[str]:
    """``text`` as a fenced code block whose fence is longer than any backtick run inside, so it cannot close it."""
    text = str(text)
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return [fence + language, text, fence]


def _one_line(text) -> str:
    return re.sub(r"\s+", " ", str(text)).strip()[:500]


def _cell(text) -> str:
    """Plain text for a table cell or a list item: one line, no markup (HTML escaped, ``|`` and markdown marks)."""
    import html

    return re.sub(r"([\\`*_\[\]|#])", r"\\\1", html.escape(_one_line(text), quote=False))


def _training(training) -> list[str]:
    if not training:
        return []
    training = training if isinstance(training, dict) else {"command": str(training)}
    lines = ["## Training", ""]
    if training.get("command"):
        lines += [*_fence(training["command"], "bash"), ""]
    data = training.get("data")
    if data:
        lines += ["Data: " + ", ".join(_code(d) for d in (data if isinstance(data, list) else [data])), ""]
    used = training.get("evaluation_data")  # what --allow-evaluation-data or pretraining let through: said first
    if used:
        lines += [f"**Trained on evaluation data**: {_cell(u)}" for u in (used if isinstance(used, list) else [used])]
        lines += [""]
    skip = ("command", "data", "evaluation_data")
    lines += [f"- {_cell(k)}: {_code(json.dumps(v))}" for k, v in training.items() if k not in skip]
    return [*lines, ""]


def _evaluation_rows(evaluation) -> dict[str, dict[str, float]]:
    """``{system or collection: {measure: number}}`` with anything else left out (a card may be someone else's)."""
    if not isinstance(evaluation, dict):
        return {}
    rows = {}
    for name, row in evaluation.items():
        if isinstance(row, dict):
            numbers = {str(m): v for m, v in row.items() if isinstance(v, int | float) and not isinstance(v, bool)}
            if numbers:
                rows[str(name)] = numbers
    return rows


def _eval_results(evaluation: dict[str, dict[str, float]], task: str) -> list:
    """The evaluation as ``huggingface_hub`` ``EvalResult`` entries (the card's ``model-index``)."""
    from huggingface_hub import EvalResult

    return [
        EvalResult(task_type=task, dataset_type=_one_line(name), dataset_name=_one_line(name),
                   metric_type=_one_line(measure), metric_value=value)  # fmt: skip
        for name, row in evaluation.items()
        for measure, value in row.items()
    ]


def _evaluation(evaluation: dict[str, dict[str, float]]) -> list[str]:
    """``{system or collection: {measure: value}}`` as a markdown table (also in the front matter's model-index)."""
    if not evaluation:
        return []
    measures = list(dict.fromkeys(m for row in evaluation.values() for m in row))
    lines = ["## Evaluation", "", "| | " + " | ".join(_cell(m) for m in measures) + " |",
             "|---" * (len(measures) + 1) + "|"]  # fmt: skip
    for name, row in evaluation.items():
        lines.append(f"| {_cell(name)} | " + " | ".join(_number(row.get(m)) for m in measures) + " |")
    return [*lines, ""]


def _number(value) -> str:
    if value is None:
        return ""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


# ---------------------------------------------------------------------------------------------------- writing
def write_card(folder: str | os.PathLike, meta: dict | None = None, repo: str | None = None) -> bool:
    """Writes ``README.md`` of a model folder from its ``pt_meta.json`` (or ``meta``); False, writing nothing, when
    its README.md is not ours or its format has no card. ``repo``: the model repo it goes to, named by the usage."""
    folder = os.fspath(folder)
    meta = read_meta(folder) if meta is None else meta
    readme = os.path.join(folder, CARD_FILE)
    if os.path.isfile(readme) and not is_ours(readme):
        return False
    try:
        text = render_card(meta, repo=repo)
    except ValueError:  # not a model format of ours: no card
        return False
    with open(readme, "w", encoding="utf-8") as f:
        f.write(text)
    return True


def update_card(folder: str | os.PathLike, info: dict) -> dict:
    """Merges ``info`` (None values ignored) into the card of ``pt_meta.json``, rewrites the README.md, returns the
    card."""
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
        info["fresh_weights"] = False  # trained: no longer the random start the save may have recorded
        info["training"] = {**(read_meta(folder).get("card") or {}).get("training", {}), **run}
    return update_card(folder, info)
