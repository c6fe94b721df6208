"""SPLADE loading: query/doc pairs (``from_pretrained(query=, doc=)``, save and reload), DistilBERT MLMs, and exact
loading (a checkpoint with a missing or an unused tensor raises ``CheckpointError`` naming it; only the explicit
new-head path starts weights fresh, with one warning). Uses the hub fixtures (``../shared/hub``) where a released
layout matters, tiny random models otherwise."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
from _hub import expected, require_fixtures, snapshot
from _tiny import bert_config, distilbert_config
from transformers import BertModel, DistilBertForMaskedLM

from pyterrier_tite.models.checkpoint import CheckpointError
from pyterrier_tite.models.splade.modeling import SpladeEncoder, SpladePair, mlm_from_pretrained, splade_pool
from pyterrier_tite.pt.splade import Splade

pytestmark = pytest.mark.usefixtures("single_thread")

SINGLE = "naver/splade-cocondenser-ensembledistil"
QUERY, DOC = "naver/efficient-splade-V-large-query", "naver/efficient-splade-V-large-doc"
TEXTS = ["what is sparse retrieval?", "a neural model ranks the documents of a search engine index"]


@pytest.fixture(scope="module")
def pair() -> Splade:
    require_fixtures()
    return Splade.from_pretrained(query=QUERY, doc=DOC, device="cpu")


def copy_of(repo: str, tmp_path: Path) -> Path:
    """A writable copy of a fixture repo's snapshot, to doctor."""
    return Path(shutil.copytree(snapshot(repo), tmp_path / repo.replace("/", "--")))


def edit_weights(folder: Path, edit) -> None:
    """Apply ``edit(state_dict)`` to every weight file of ``folder`` (both formats where both are present)."""
    from safetensors.torch import load_file, save_file

    if (folder / "model.safetensors").exists():
        state = load_file(folder / "model.safetensors")
        edit(state)
        save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    if (folder / "pytorch_model.bin").exists():
        state = torch.load(folder / "pytorch_model.bin", weights_only=True)
        edit(state)
        torch.save(state, folder / "pytorch_model.bin")


# -- pairs ---------------------------------------------------------------------------------------------------------
def test_pair_encodes_queries_and_docs_with_their_own_mlm(pair):
    assert isinstance(pair.encoder, SpladePair) and pair.is_pair
    assert pair.tokenizers["query"] is not pair.tokenizers["doc"]  # each side keeps its own repo's tokenizer
    query_side = Splade.from_pretrained(QUERY, device="cpu")
    doc_side = Splade.from_pretrained(DOC, device="cpu")
    torch.testing.assert_close(pair.encode(TEXTS, 64, role="query"), query_side.encode(TEXTS, 64))
    torch.testing.assert_close(pair.encode(TEXTS, 64, role="doc"), doc_side.encode(TEXTS, 64))
    assert not torch.allclose(pair.encode(TEXTS, 64, role="query"), pair.encode(TEXTS, 64, role="doc"))


def test_pair_must_be_told_the_role(pair):
    with pytest.raises(ValueError, match="role="):
        pair.encode(TEXTS, 64)
    with pytest.raises(TypeError, match="side"):
        pair.encoder(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3))


def test_pair_save_and_reload(pair, tmp_path):
    pair.save_pretrained(str(tmp_path / "pair"))
    loaded = Splade.from_pretrained(str(tmp_path / "pair"), device="cpu")
    assert loaded.is_pair
    for role in ("query", "doc"):
        torch.testing.assert_close(loaded.encode(TEXTS, 64, role=role), pair.encode(TEXTS, 64, role=role))
    assert loaded.terms == pair.terms


def test_pair_scorer_uses_query_mlm_for_queries(pair):
    res = pd.DataFrame({"qid": ["1", "1"], "query": [TEXTS[0]] * 2, "docno": ["a", "b"], "text": TEXTS})
    scores = pair.scorer()(res)["score"].tolist()
    expected_scores = pair.encode(TEXTS[:1], 64, role="query") @ pair.encode(TEXTS, 256, role="doc").T
    assert scores == pytest.approx(expected_scores[0].tolist(), abs=1e-5)


def test_from_pretrained_arguments_are_checked():
    with pytest.raises(TypeError, match="query= and doc="):
        Splade.from_pretrained()
    with pytest.raises(TypeError, match="query= and doc="):
        Splade.from_pretrained(query=QUERY)
    with pytest.raises(TypeError, match="query= and doc="):
        Splade.from_pretrained(SINGLE, query=QUERY, doc=DOC)
    with pytest.raises(FileNotFoundError, match="not-a-repo"):
        Splade.from_pretrained("nobody/not-a-repo")


class SwappedVocabulary:
    """A tokenizer whose vocabulary differs from another's at two ids (all ``Splade`` compares)."""

    def __init__(self, tokenizer, a: int, b: int):
        self.tokenizer, self.swap = tokenizer, {a: b, b: a}

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return self.tokenizer.convert_ids_to_tokens([self.swap.get(i, i) for i in ids])


def test_pair_with_different_vocabularies_is_refused(pair):
    query_tokenizer = SwappedVocabulary(pair.tokenizers["query"], 150, 160)
    with pytest.raises(ValueError, match=r"differ at 2 ids \(first: \[150, 160\]\)"):
        Splade(pair.encoder, pair.tokenizers["doc"], query_tokenizer=query_tokenizer, device="cpu")


# -- DistilBERT ----------------------------------------------------------------------------------------------------
def test_distilbert_mlm_takes_no_token_types(pair):
    encoder = pair.encoder.side("doc")
    inputs = pair.tokenizers["doc"](TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = encoder.mlm(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
        got = encoder(**inputs, token_type_ids=torch.zeros_like(inputs["input_ids"]))  # dropped, not an error
    torch.testing.assert_close(got, splade_pool(logits, inputs["attention_mask"]))


# -- exact loading -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("repo", [SINGLE, QUERY])
def test_missing_tensor_is_named(repo, tmp_path):
    require_fixtures()
    folder = copy_of(repo, tmp_path)
    name = next(k for k in torch.load(folder / "pytorch_model.bin", weights_only=True) if ".layer.1." in k)
    edit_weights(folder, lambda state: state.pop(name))
    with pytest.raises(CheckpointError, match="missing from the checkpoint: " + name.replace(".", r"\.")):
        Splade.from_pretrained(str(folder), device="cpu")


@pytest.mark.parametrize("repo", [SINGLE, DOC])
def test_unused_tensor_is_named(repo, tmp_path):
    require_fixtures()
    folder = copy_of(repo, tmp_path)
    edit_weights(folder, lambda state: state.update({"extra_head.weight": torch.zeros(2, 2)}))
    with pytest.raises(CheckpointError, match="unused: extra_head.weight"):
        Splade.from_pretrained(str(folder), device="cpu")


def test_tied_decoder_and_position_ids_are_no_problem(tmp_path):
    """The released BERT files: ``.bin`` with ``position_ids``, safetensors with the tied decoder stored once."""
    require_fixtures()
    folder = copy_of(SINGLE, tmp_path)
    inputs, outputs = expected(SINGLE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_safetensors = Splade.from_pretrained(str(folder), device="cpu")
        (folder / "model.safetensors").unlink()
        from_bin = Splade.from_pretrained(str(folder), device="cpu")
    torch.testing.assert_close(from_bin.encode(inputs["docs"], 256), from_safetensors.encode(inputs["docs"], 256))


def test_a_broken_side_of_a_pair_is_named(tmp_path):
    require_fixtures()
    folder = copy_of(DOC, tmp_path)
    edit_weights(folder, lambda state: state.pop("vocab_transform.bias"))
    with pytest.raises(CheckpointError, match="vocab_transform.bias"):
        Splade.from_pretrained(query=QUERY, doc=str(folder), device="cpu")


def test_new_head_starts_fresh_with_one_warning(tmp_path):
    """Pretraining from an encoder-only checkpoint: the MLM head is new (said once), its pooler unused."""
    config = bert_config(16, hidden=8)
    BertModel(config).save_pretrained(tmp_path / "encoder")  # with a pooler, no MLM head
    with pytest.raises(CheckpointError, match=r"missing from the checkpoint: cls\.predictions"):
        mlm_from_pretrained(str(tmp_path / "encoder"))
    with pytest.warns(UserWarning, match=r"start fresh \(new head\): cls\.predictions") as record:
        mlm = mlm_from_pretrained(str(tmp_path / "encoder"), new_head=True)
    assert len([w for w in record if "fresh" in str(w.message)]) == 1
    assert type(mlm).__name__ == "BertForMaskedLM"


def test_new_head_still_refuses_a_missing_encoder_tensor(tmp_path):
    config = distilbert_config(16, dim=8, layers=2)
    DistilBertForMaskedLM(config).save_pretrained(tmp_path / "mlm")
    config.n_layers = 3  # the checkpoint lacks layer 2
    config.save_pretrained(tmp_path / "mlm")
    with pytest.raises(CheckpointError, match=r"transformer\.layer\.2\."):
        SpladeEncoder.from_pretrained(str(tmp_path / "mlm"), new_head=True)


def test_pretraining_checkpoint_loads_as_mlm_quietly(tmp_path):
    """``bert-base-uncased`` ships ``BertForPreTraining``: its pooler and next-sentence head are unused by an MLM."""
    from transformers import BertForPreTraining

    config = bert_config(16, hidden=8)
    torch.manual_seed(0)
    pretraining = BertForPreTraining(config).eval()
    pretraining.save_pretrained(tmp_path / "bert")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        encoder = SpladeEncoder.from_pretrained(str(tmp_path / "bert")).eval()
    ids, mask = torch.tensor([[2, 5, 7, 3]]), torch.ones(1, 4, dtype=torch.long)
    with torch.no_grad():
        expected_reps = splade_pool(pretraining(input_ids=ids, attention_mask=mask).prediction_logits, mask)
        torch.testing.assert_close(encoder(ids, mask), expected_reps)


def test_splade_training_start_from_an_encoder_only_checkpoint(tmp_path):
    """``train-splade --init minilm``: a plain encoder as SPLADE start needs ``new_head=True`` (said once)."""
    from transformers import BertTokenizerFast

    config = bert_config(6, hidden=8)
    BertModel(config).save_pretrained(tmp_path / "encoder")
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"])}
    BertTokenizerFast(vocab=vocab).save_pretrained(tmp_path / "encoder")
    with pytest.raises(CheckpointError, match="cls.predictions"):
        Splade.from_pretrained(str(tmp_path / "encoder"), device="cpu")
    with pytest.warns(UserWarning, match="new head"):
        model = Splade.from_pretrained(str(tmp_path / "encoder"), new_head=True, device="cpu")
    assert model.encode(["a b"], 8).shape == (1, 6)
