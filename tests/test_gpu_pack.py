"""``scripts/gpu_pack.py``: models travel to a GPU machine as fp16 and come back as fp32 folders, MiniLM rebuilt from
the probe's ``bert.*`` weights (the probe is MiniLM plus a score head)."""

from __future__ import annotations

import torch
from _scripts import load_script
from safetensors.torch import load_file, save_file


def test_unpack_restores_fp32_folders_and_minilm(tmp_path):
    pack = load_script("scripts/gpu_pack.py")
    packed = tmp_path / "packed"
    weights = {"bert.embeddings.word_embeddings.weight": torch.randn(8, 4), "classifier.weight": torch.randn(1, 4),
               "bert.embeddings.position_ids": torch.arange(4)}  # fmt: skip
    for name in ("probe", "splade", "minilm"):
        (packed / name).mkdir(parents=True)
        for meta in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
            (packed / name / meta).write_text(f"{name} {meta}")
    (packed / "probe" / "tokenizer.json").unlink()  # deduplicated by pack: the copy comes from minilm/
    save_file(
        {k: v.half() if v.is_floating_point() else v for k, v in weights.items()},
        packed / "probe" / "model.safetensors",
    )
    save_file({"w": torch.ones(2, dtype=torch.float16)}, packed / "splade" / "model.safetensors")
    out = tmp_path / "out"
    pack.unpack(packed, out)
    probe = load_file(out / "probe" / "model.safetensors")
    assert probe["classifier.weight"].dtype == torch.float32
    assert torch.equal(probe["bert.embeddings.position_ids"], torch.arange(4))
    minilm = load_file(out / "minilm" / "model.safetensors")
    assert set(minilm) == {"embeddings.word_embeddings.weight", "embeddings.position_ids"}
    assert torch.equal(
        minilm["embeddings.word_embeddings.weight"], weights["bert.embeddings.word_embeddings.weight"].half().float()
    )
    assert (out / "probe" / "tokenizer.json").read_text() == "minilm tokenizer.json"
    assert load_file(out / "splade" / "model.safetensors")["w"].dtype == torch.float32
