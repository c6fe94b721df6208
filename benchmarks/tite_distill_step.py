"""Time per training step of ``distill-tite`` with and without frozen lower layers (``--freeze-layers``; a setting
``Nc`` also runs the N frozen layers once beforehand, as ``--cache-frozen`` does), measured in one run: the same
student structure, batches and optimizer, round-robin over the settings for ``--rounds`` rounds, each setting's
median step kept.

A step is what the recipe's trainer does: encode the batch's texts with gradients, cosine + in-batch KL against the
teacher's vectors, backward, AdamW. Batches are the recipe's (documents with their Inverse-Cloze pseudo-queries, and
queries, ``--groups`` text groups each) from ``--collections``; the teacher's vectors are computed first, untimed.

    python benchmarks/tite_distill_step.py --threads 2 --freeze-layers 0,1 --rounds 3
    python benchmarks/tite_distill_step.py --threads 2 --freeze-layers 0,2,2c --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main(argv=None) -> int:
    from pyterrier_tite.cli.distill import build_student, build_teacher
    from pyterrier_tite.devices import autocast
    from pyterrier_tite.training.distillation_texts import collect_distillation_texts
    from pyterrier_tite.training.frozen_prefix import encode_from_lower_states, lower_states
    from pyterrier_tite.training.vector_distillation import (
        DistillationWeights,
        encode_mixed,
        freeze_lower_layers,
        group_batches,
        vector_distillation_loss,
    )

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", default="minilm")
    p.add_argument("--pooling-layers", type=int, default=None, help="the last N layers pool (default: the recipe's)")
    p.add_argument("--kernel", type=int, default=None, help="their kernel (default 2 where --pooling-layers is given)")
    p.add_argument("--structure", default=None, help="pooling placed per layer (distill-tite's --structure)")
    p.add_argument(
        "--freeze-layers", default="0,1",
        help="settings to compare, comma-separated (N frozen layers, Nc: the same with their states cached); the "
        "first is the base",
    )  # fmt: skip
    p.add_argument("--collections", default="scifact,cranfield")
    p.add_argument("--queries", default="beir/scifact/train")
    p.add_argument("--groups", type=int, default=32, help="text groups per step (the recipe's --batch-size)")
    p.add_argument("--batches", type=int, default=4, help="steps per setting and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    settings = args.freeze_layers.split(",")

    flags = argparse.Namespace(teacher=args.teacher, kernel=args.kernel, arrangement=None,
                               pooling_layers=args.pooling_layers, structure=args.structure, dropout=None)  # fmt: skip
    teacher = build_teacher(flags, device="cpu")
    data = collect_distillation_texts(
        args.collections.split(","), args.queries.split(","), max_docs=args.groups * args.batches,
        max_queries=args.groups, seed=args.seed,
    )  # fmt: skip
    batches = list(group_batches(data.groups, args.groups, args.seed)(0, 0, 1))[: args.batches]
    if len(batches) < args.batches:
        raise SystemExit(f"only {len(batches)} batches of {args.groups} groups in these collections")
    with torch.inference_mode():
        targets = [encode_mixed(teacher.text_encoder, [data.texts[i] for i in b], [data.roles[i] for i in b], 64)
                   for b in batches]  # fmt: skip
    students = {}
    for setting in settings:
        torch.manual_seed(args.seed)
        encoder = build_student(flags, teacher, device="cpu").text_encoder
        frozen = int(setting.rstrip("c"))
        freeze_lower_layers(encoder.model, frozen)
        lower = None
        if setting.endswith("c"):  # untimed, as the recipe does it once before training
            lower = lower_states(encoder, data.texts, data.roles, frozen, precision=args.precision, verbose=False)
        encoder.model.train()
        trainable = [q for q in encoder.model.parameters() if q.requires_grad]
        students[setting] = (encoder, torch.optim.AdamW(trainable, lr=1e-5), lower)

    def step(setting: str, batch: list[int], target: torch.Tensor) -> float:
        encoder, optimizer, lower = students[setting]
        began = time.perf_counter()
        with autocast("cpu", args.precision):
            if lower is not None:
                vectors = encode_from_lower_states(encoder, lower, batch)
            else:
                texts, roles = [data.texts[i] for i in batch], [data.roles[i] for i in batch]
                vectors = encode_mixed(encoder, texts, roles, len(batch))
        loss, _ = vector_distillation_loss(vectors, target, DistillationWeights())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - began

    times: dict[str, list[float]] = {setting: [] for setting in settings}
    for setting in settings:  # warm-up, untimed
        step(setting, batches[0], targets[0])
    for _ in range(args.rounds):
        for setting in settings:
            times[setting] += [step(setting, b, t) for b, t in zip(batches, targets, strict=True)]
    texts = sum(len(b) for b in batches) / len(batches)
    print(f"TITE from {args.teacher}, {args.pooling_layers} pooling layers, {texts:.0f} texts per step, "
          f"{args.precision}, {args.threads} threads, {args.rounds} rounds x {args.batches} steps")  # fmt: skip
    print("| frozen layers | s per step (median) | x faster than " + str(settings[0]) + " |")
    print("|---|---|---|")
    base = statistics.median(times[settings[0]])
    for setting in settings:
        median = statistics.median(times[setting])
        name = f"{setting[:-1]}, cached" if setting.endswith("c") else setting
        print(f"| {name} | {median:.3f} | {base / median:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
