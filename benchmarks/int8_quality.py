"""What dynamic int8 costs a trained cross-encoder's rankings: DL19 BM25 top-100 re-ranked in fp32 and int8 (issue 65).

The question: does ``MonoCE(dtype="int8")`` keep the fp32 ranking (Spearman per query >= 0.98) and nDCG@10 (within
0.01), and at what speed? Variants: every encoder linear layer int8 (what ``dtype="int8"`` does), only the attention
projections int8, every layer but the feed-forward output, and (on a CPU with native bf16) bf16 autocast. Each
re-ranks the judged DL19 queries' BM25 top-100 in one call; printed per variant: nDCG@10, ms per pair, and Spearman
per query against fp32 (min, mean, share of queries >= 0.98).

No trained cross-encoder ships offline, so ``--folder`` is one trained here, e.g. 150 steps of the distillation recipe
(about 10 minutes on 2 cores)::

    python -m experiments.distill_rerankers --output-dir runs/int8-mono --models mono --seeds 43 --max-steps 150 \\
        --max-queries 600 --threads 1 --precision fp32 --evaluate dl19 --eval-depth 20 --train-doc-max-length 128
    python benchmarks/int8_quality.py --folder runs/int8-mono/mono/seed-43

Issue 73's two rounds of levers (every encoder linear layer int8 in each):
1. SmoothQuant-style scale migration: each layer's input channels divided by ``s = max|x|^a / max|W|^(1-a)`` (maxima
   from DL20 calibration pairs, never the DL19 pairs scored), its weight columns multiplied by ``s``, so that
   torch's one activation scale per batch meets no outlier channel. BERT is post-LayerNorm (a LayerNorm's output is
   also the residual), so ``1 / s`` is one multiply before the layer instead of being folded into the LayerNorm.
2. One activation scale per token: rows quantized with their own scale, ``torch._int_mm`` (int8 x int8 -> int32),
   then one scale per row and per output channel; alone and after the scale migration.
"""

from __future__ import annotations

import argparse
import re
import time
import warnings

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import nn


def quantized(scorer, keep) -> nn.Module:
    """A copy of ``scorer`` with the encoder's linear layers whose names pass ``keep`` dynamic int8 (per channel)."""
    spec = dict.fromkeys(filter(keep, backbone_linears(scorer)), torch.ao.quantization.per_channel_dynamic_qconfig)
    copy = torch.ao.quantization.quantize_dynamic(scorer, spec, dtype=torch.qint8, inplace=False).eval()
    copy._packed_encoder = None
    return copy


def backbone_linears(scorer) -> dict[str, nn.Linear]:
    """The encoder's linear layers by name (score heads excluded: they stay float32, like every head)."""
    heads = ("classifier", "pooler", "head")
    return {
        name: module
        for name, module in scorer.named_modules()
        if type(module) is nn.Linear and name.startswith("backbone.") and not any(h in name for h in heads)
    }


def with_layers(scorer, make) -> nn.Module:
    """A copy of ``scorer`` whose encoder linear layers are replaced by ``make(name, linear)``."""
    copy = __import__("copy").deepcopy(scorer)
    for name, linear in backbone_linears(copy).items():
        parent, _, attribute = name.rpartition(".")
        setattr(copy.get_submodule(parent), attribute, make(name, linear))
    copy._packed_encoder = None
    return copy.eval()


class _Recorder(nn.Module):
    """A linear layer that keeps the largest |input| per channel it has seen (calibration)."""

    def __init__(self, linear: nn.Linear, maxima: dict, name: str):
        super().__init__()
        self.linear, self.maxima, self.name = linear, maxima, name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seen = x.detach().reshape(-1, x.shape[-1]).abs().amax(0)
        old = self.maxima.get(self.name)
        self.maxima[self.name] = seen if old is None else torch.maximum(old, seen)
        return self.linear(x)


def input_maxima(reranker, calibration) -> dict[str, torch.Tensor]:
    """Per input channel, the largest |activation| each encoder linear layer sees on ``calibration`` pairs."""
    maxima: dict[str, torch.Tensor] = {}
    scorer = reranker.scorer
    reranker.scorer = with_layers(scorer, lambda name, linear: _Recorder(linear, maxima, name))
    try:
        reranker.transform(calibration)
    finally:
        reranker.scorer = scorer
    return maxima


def smoothing(linear: nn.Linear, maximum: torch.Tensor, alpha: float) -> torch.Tensor:
    """SmoothQuant's per-input-channel factor ``max|x|^a / max|W|^(1-a)`` (x / s and W * s give the same product)."""
    weight = linear.weight.detach().abs().amax(0).clamp_min(1e-5)
    return (maximum.clamp_min(1e-5) ** alpha / weight ** (1 - alpha)).clamp_min(1e-5)


def layernorm_maxima(scorer, spread: float = 4.0) -> dict[str, torch.Tensor]:
    """Data-free input maxima of the layers a LayerNorm feeds (Q/K/V: the previous layer's output LayerNorm or the
    embeddings'; the feed-forward input: the attention's output LayerNorm): ``|gamma| * spread + |beta|`` per channel,
    the largest a normalised value within ``spread`` standard deviations becomes."""
    maxima = {}
    for name in backbone_linears(scorer):
        prefix, _, rest = name.partition(".layer.")
        index, _, inner = rest.partition(".")
        if inner.startswith("attention.self."):
            norm = f"{prefix.rsplit('.', 1)[0]}.embeddings.LayerNorm" if index == "0" else (
                f"{prefix}.layer.{int(index) - 1}.output.LayerNorm")
        elif inner == "intermediate.dense":
            norm = f"{prefix}.layer.{index}.attention.output.LayerNorm"
        else:
            continue
        module = scorer.get_submodule(norm)
        maxima[name] = module.weight.detach().abs() * spread + module.bias.detach().abs()
    return maxima


class SmoothedDynamicInt8(nn.Module):
    """``x / s`` into torch's dynamic int8 linear layer holding ``W * s`` (one activation scale per batch)."""

    def __init__(self, linear: nn.Linear, s: torch.Tensor):
        super().__init__()
        scaled = nn.Linear(linear.in_features, linear.out_features)
        with torch.no_grad():
            scaled.weight.copy_(linear.weight * s)
            scaled.bias.copy_(linear.bias)
        spec = {"0": torch.ao.quantization.per_channel_dynamic_qconfig}
        self.inner = torch.ao.quantization.quantize_dynamic(nn.Sequential(scaled), spec, dtype=torch.qint8)[0]
        self.register_buffer("inverse", 1.0 / s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x * self.inverse)


class PerTokenInt8(nn.Module):
    """int8 weights (one scale per output channel) times int8 activations with one scale per token (row), multiplied
    by ``torch._int_mm`` into int32; optionally after the scale migration ``x / s``."""

    def __init__(self, linear: nn.Linear, s: torch.Tensor | None = None):
        super().__init__()
        weight = linear.weight.detach().float() * (1 if s is None else s)
        scale = weight.abs().amax(1).clamp_min(1e-8) / 127
        self.register_buffer("weight_t", torch.round(weight / scale[:, None]).to(torch.int8).t().contiguous())
        self.register_buffer("weight_scale", scale)
        self.register_buffer("bias", linear.bias.detach().float().clone())
        self.register_buffer("inverse", None if s is None else 1.0 / s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if self.inverse is not None:
            rows = rows * self.inverse
        scale = rows.abs().amax(1, keepdim=True).clamp_min(1e-8) / 127
        quantized = torch.round(rows / scale).to(torch.int8)
        out = torch._int_mm(quantized, self.weight_t).float().mul_(scale).mul_(self.weight_scale).add_(self.bias)
        return out.reshape(*x.shape[:-1], out.shape[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", required=True, help="a trained cross-encoder folder (see the module docstring)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--alpha", type=float, nargs="*", default=[0.5, 0.8], help="scale migration strengths")
    parser.add_argument("--library-alpha", type=float, nargs="*", default=[], help="dtype='int8' at these strengths")
    parser.add_argument("--only", default=".", help="a regular expression: the variants to run (fp32 always runs)")
    parser.add_argument("--calibration-queries", type=int, default=10, help="DL20 queries (BM25 top 100) calibrating")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    from ir_measures import calc_aggregate, nDCG

    import pyterrier_tite as t
    from pyterrier_tite.devices import cpu_has_native_bf16
    from pyterrier_tite.pt.first_stage import TREC_DL

    dataset = t.datasets.get_dataset(TREC_DL["2019"])
    qrels = dataset.get_qrels()
    run = t.trec_dl_bm25("2019")(dataset.get_topics())
    run = run[run["qid"].isin(set(qrels["qid"]))].reset_index(drop=True)
    qrels = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    fp32 = t.MonoCE(args.folder, device="cpu")
    int8 = t.MonoCE(args.folder, device="cpu", dtype="int8")
    variants = {
        "fp32": fp32.scorer,
        "int8, every layer (dtype='int8')": int8.scorer,
        "int8, attention only": quantized(fp32.scorer, lambda name: ".attention." in name),
        "int8, all but feed-forward out": quantized(
            fp32.scorer, lambda name: ".attention." in name or not name.endswith("output.dense")
        ),
    }
    calibration = t.trec_dl_bm25("2020")(t.datasets.get_dataset(TREC_DL["2020"]).get_topics())
    calibration = calibration[calibration["qid"].isin(calibration["qid"].unique()[: args.calibration_queries])]
    maxima = input_maxima(fp32, calibration)
    for alpha in args.alpha:
        layers = backbone_linears(fp32.scorer)
        factors = {name: smoothing(linear, maxima[name], alpha) for name, linear in layers.items()}
        variants[f"int8, migrated a={alpha}, per batch"] = with_layers(
            fp32.scorer, lambda name, linear, f=factors: SmoothedDynamicInt8(linear, f[name]))
        variants[f"int8, migrated a={alpha}, per token"] = with_layers(
            fp32.scorer, lambda name, linear, f=factors: PerTokenInt8(linear, f[name]))
    variants["int8, per token"] = with_layers(fp32.scorer, lambda name, linear: PerTokenInt8(linear))
    free = layernorm_maxima(fp32.scorer)
    for alpha in args.alpha:
        factors = {name: smoothing(layers[name], maximum, alpha) for name, maximum in free.items()}
        variants[f"int8, LayerNorm-migrated a={alpha}, per token"] = with_layers(
            fp32.scorer, lambda name, linear, f=factors: PerTokenInt8(linear, f.get(name)))
    from pyterrier_tite.models import int8_linear

    for alpha in args.library_alpha:  # dtype='int8' with another migration strength
        int8_linear.MIGRATION, default = alpha, int8_linear.MIGRATION
        variants[f"int8 (dtype='int8'), a={alpha}"] = fp32.scorer.quantized_int8()
        int8_linear.MIGRATION = default
    variants = {name: scorer for name, scorer in variants.items() if name == "fp32" or re.search(args.only, name)}
    precisions = dict.fromkeys(variants, "fp32")
    if cpu_has_native_bf16():  # for comparison: bf16 autocast, where the CPU computes it natively
        variants["bf16 (dtype=torch.bfloat16)"] = fp32.scorer
        precisions["bf16 (dtype=torch.bfloat16)"] = "bf16"
    qids = run["qid"].to_numpy()
    keys = list(zip(run["qid"], run["docno"], strict=True))
    reference = None
    print(f"{len(run)} pairs of {len(set(qids))} judged DL19 queries; {torch.get_num_threads()} threads")
    print(f"{'variant':<38} {'nDCG@10':>8} {'ms/pair':>8} {'Spearman min':>13} {'mean':>6} {'>=0.98':>7}")
    for name, scorer in variants.items():
        fp32.scorer, fp32.precision = scorer, precisions[name]
        start = time.perf_counter()
        out = fp32.transform(run)
        seconds = time.perf_counter() - start
        scores = out.set_index(["qid", "docno"])["score"].reindex(keys).to_numpy()
        reference = scores if reference is None else reference
        ranked = out.rename(columns={"qid": "query_id", "docno": "doc_id"})
        ndcg = calc_aggregate([nDCG @ 10], qrels, ranked)[nDCG @ 10]
        rho = np.array([spearmanr(scores[qids == q], reference[qids == q]).statistic for q in dict.fromkeys(qids)])
        print(
            f"{name:<38} {ndcg:8.4f} {1000 * seconds / len(run):8.2f} {rho.min():13.3f} {rho.mean():6.3f} "
            f"{(rho >= 0.98).mean():7.2f}"
        )


if __name__ == "__main__":
    main()
