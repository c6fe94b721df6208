"""Encoding speed of a distilled TITE against the bi-encoder it replaces (``python -m experiments.distill_tite``),
measured in one run: the ratio a user sees when swapping the teacher for its TITE in an indexing or query pipeline.

Both models encode the same real texts (half scifact documents, half DL passages; scifact / DL queries), each under
its own length limits and the chosen dtype, round-robin for ``--rounds`` rounds, keeping each model's fastest round.
``--path pipeline`` (the default) times what an indexing or query pipeline runs: the bi-encoder's ``encode_docs`` /
``encode_queries``, which batch texts of similar length together (little padding) under the model's own autocast.
``--path torch`` times the torch-side encoders on batches in the texts' given order (mixed lengths, so more padding;
the measurements before this option were taken that way).

The student defaults to the recipe's structure built from the teacher (speed does not depend on the weights); pass
``--student`` for a trained folder, or ``--structures`` for several structures in the same run (their ratios are then
comparable with each other: between runs the teacher's own speed moves by up to 15 % on a shared machine). The last
column is the teacher's matmul FLOPs over the student's on the same documents: the speed-up the structure allows if
both ran their products at one rate, so a measured ratio far below it points at overhead, one near it at the structure.

    python -m experiments.distill_tite.speed --threads 2 --docs 512 --queries 512 --dtype bfloat16
    python -m experiments.distill_tite.speed --structures 4:2,4:3,5:2     # pooling layers:kernel, one run
    python -m experiments.distill_tite.speed --structures 4:2,0/2/0/2/2/g  # or pooling placed per layer
"""

from __future__ import annotations

import argparse
import time

import torch


def cpu_flags() -> str:
    """The CPU's vector / matrix features relevant to bf16 (from /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    return ",".join(w for w in wanted if w in flags) or "none of avx2/avx512/amx"


def parse_structures(spec: str) -> dict[str, dict]:
    """``"4:2,0/2/0/2/2/g"`` -> each entry's ``build_student`` flags: ``POOLING_LAYERS:KERNEL`` (the last layers pool)
    or a per-layer ``--structure`` of the distillation recipe; a malformed entry names itself."""
    from pyterrier_tite.models.tite.from_bert import parse_structure

    out = {}
    for item in (part.strip() for part in spec.split(",")):
        if "/" in item:
            parse_structure(item)  # raises naming the entry
            out[item] = {"structure": item, "pooling_layers": None, "kernel": None}
            continue
        parts = item.split(":")
        if len(parts) != 2 or not all(part.isdigit() for part in parts):
            raise ValueError(f"--structures entry {item!r}: expected POOLING_LAYERS:KERNEL (e.g. 4:2) or a per-layer "
                             "structure (e.g. 0/2/0/2/2/g)")  # fmt: skip
        out[item] = {"structure": None, "pooling_layers": int(parts[0]), "kernel": int(parts[1])}
    return out


def one_structure(args: argparse.Namespace) -> dict[str, dict]:
    """The single student without ``--structures``: the late arrangement's where any of its flags is given, else the
    recipe's default (``build_student`` resolves it from the teacher's depth)."""
    from experiments.distill_tite.recipe import DEFAULT_POOLING_LAYERS

    if args.pooling_layers is None and args.kernel is None and args.arrangement is None:
        return {"default": {"structure": None, "pooling_layers": None, "kernel": None}}
    layers = DEFAULT_POOLING_LAYERS if args.pooling_layers is None else args.pooling_layers
    return {f"{layers}:{args.kernel or 2}": {"structure": None, "pooling_layers": layers, "kernel": args.kernel or 2}}


def doc_flop_ratio(teacher, student, docs: list[str]) -> float:
    """The teacher's matmul FLOPs over the student's on these documents (each model's own tokens and length limit):
    the documents/s ratio the structure allows if both ran their products at one rate, with no padding or overhead."""
    from pyterrier_tite.benchmarking import model_flops

    def lengths(model) -> list[int]:
        ids = model.tokenizer(docs, truncation=True, max_length=model.doc_max_length)["input_ids"]
        return [len(row) for row in ids]

    t, c = teacher.model.config, student.model.config
    layers = t.num_hidden_layers
    teacher_shape = ([None] * layers, [t.hidden_size] * layers, None, [t.intermediate_size] * layers)
    student_shape = (c.kernel_sizes, c.hidden_sizes, c.strides, c.intermediate_sizes)
    return sum(model_flops(n, *teacher_shape) for n in lengths(teacher)) / sum(
        model_flops(n, *student_shape) for n in lengths(student)
    )


def timed(encode, texts: list[str], batch_size: int) -> float:
    began = time.perf_counter()
    with torch.inference_mode():
        encode(texts, batch_size)
    return time.perf_counter() - began


def encoders(model, path: str, precision: str):
    """``(encode_docs, encode_queries)`` of a PyTerrier bi-encoder on the chosen path; on the pipeline path the model
    is set to ``precision`` (its own autocast), on the torch path the caller's autocast applies."""
    if path == "pipeline":
        model.precision = precision
        return model.encode_docs, model.encode_queries
    return model.text_encoder.encode_docs, model.text_encoder.encode_queries


def main(argv=None) -> int:
    from experiments.distill_tite.recipe import build_student, build_teacher
    from pyterrier_tite.benchmarking import load_texts
    from pyterrier_tite.devices import autocast, resolve_precision
    from pyterrier_tite.pt.tite import TITE

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", default="minilm")
    p.add_argument("--student", default=None, help="a distilled TITE folder (default: the recipe's structure)")
    p.add_argument("--pooling-layers", type=int, default=None, help="the last N layers pool (default: the recipe's)")
    p.add_argument("--kernel", type=int, default=None, help="their kernel (default 2 where --pooling-layers is given)")
    p.add_argument("--arrangement", default=None)
    p.add_argument(
        "--structures",
        default=None,
        help="comma list of students measured in one run (instead of --pooling-layers/--kernel): POOLING_LAYERS:KERNEL "
        "or the distillation recipe's per-layer --structure, e.g. 4:2,0/2/0/2/2/g",
    )
    p.add_argument("--docs", type=int, default=512)
    p.add_argument("--queries", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--path",
        default="pipeline",
        choices=["pipeline", "torch"],
        help="pipeline: the bi-encoders' own encode_docs / encode_queries (length-sorted batches); torch: the "
        "torch-side encoders on batches in the given order",
    )
    args = p.parse_args(argv)
    if args.student and args.structures:
        p.error("--student measures one trained folder; --structures builds students from the teacher: pick one")
    try:
        structures = parse_structures(args.structures) if args.structures else one_structure(args)
    except ValueError as error:
        p.error(str(error))
    torch.set_num_threads(args.threads)
    teacher = build_teacher(args, device="cpu")
    if args.student:
        students = {"TITE": TITE.from_pretrained(args.student, device="cpu")}
    else:
        students = {
            f"TITE {name}": build_student(argparse.Namespace(**{**vars(args), **flags}), teacher, device="cpu")
            for name, flags in structures.items()
        }
    docs, queries = load_texts(args.docs, args.queries, args.seed)
    precision = resolve_precision(args.dtype)
    models = {"teacher": encoders(teacher, args.path, precision)}
    flop_ratios: dict[str, float] = {}  # table row -> its structure's FLOP ratio to the teacher
    for name, student in students.items():  # a student saved with a query model encodes its queries with it
        query_model = student.query_model
        encode_docs, encode_queries = encoders(student, args.path, precision)
        if query_model is not None:
            encode_queries = encoders(query_model, args.path, precision)[1]
        label = name if query_model is None else f"{name} (queries: its query model)"
        models[label] = (encode_docs, encode_queries)
        flop_ratios[label] = doc_flop_ratio(teacher, student, docs)
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for name, (encode_docs, encode_queries) in models.items():
            for role, texts, encode in (("docs", docs, encode_docs), ("queries", queries, encode_queries)):
                with autocast("cpu", precision if args.path == "torch" else "fp32"):  # pipeline: the model's own
                    seconds = timed(encode, texts, args.batch_size)
                best[(name, role)] = min(best.get((name, role), float("inf")), seconds)
    structure = "; ".join(f"{name}: {student.model.config.kernel_sizes}" for name, student in students.items())
    print(f"# teacher {args.teacher}, TITE {args.student or 'recipe structure'} (kernels {structure}); "
          f"{args.dtype}, {args.path} path, {args.threads} threads, CPU flags {cpu_flags()}; {len(docs)} docs, "
          f"{len(queries)} queries, batch {args.batch_size}, best of {args.rounds} rounds")  # fmt: skip
    print("| model | docs/s | x teacher | queries/s | x teacher | FLOP ratio, docs |")
    print("|---|---|---|---|---|---|")
    for name in models:
        cells = []
        for role, count in (("docs", len(docs)), ("queries", len(queries))):
            rate = count / best[(name, role)]
            cells += [f"{rate:,.1f}", f"{best[('teacher', role)] / best[(name, role)]:.2f}"]
        cells.append(f"{flop_ratios[name]:.2f}" if name in flop_ratios else "–")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
