"""Windowed attention vs dense attention with the same band mask: time and peak memory, as ratios from one run.

For q, k, v [batch, heads, L, d] (fp32, inference) it times
  * ``window``: ``pyterrier_tite.ops.window_attention`` (default backend: the csrc kernel on CPU),
  * ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` with the band as an [L, L] bool mask,
  * ``eager``: ``softmax(q k^T * scale + mask) v`` with a materialised additive L x L mask (the reference code's way).
Peak memory is the highest sum of bytes allocated minus freed while the call runs (torch profiler memory events),
the output included and the inputs / masks (made beforehand) not. Eager attention needs batch*heads*L*L floats
several times; batches above ``--eager-max-gib`` run on a smaller batch and time and memory are scaled up linearly
(marked ``*``). Run: ``python benchmarks/window_attention.py`` (see ``--help``).
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

from pyterrier_tite import ops
from pyterrier_tite.benchmarking import best_time, peak_bytes  # noqa: F401  (also imported from here)


def band_mask(length: int, window: int) -> torch.Tensor:
    pos = torch.arange(length)
    return (pos[:, None] - pos[None, :]).abs() <= window


def make_runs(q, k, v, eager_qkv, window: int, scale: float, backend: str | None):
    """The three attention calls for one (L, w); masks are built here, outside what is timed."""
    length = q.shape[2]
    mask = band_mask(length, window).to(q.device)
    additive = torch.zeros(length, length, dtype=q.dtype, device=q.device).masked_fill_(~mask, float("-inf"))
    qe, ke, ve = eager_qkv

    def run_window():
        return ops.window_attention(q, k, v, window, backend=backend)

    def run_sdpa():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def run_eager():
        scores = torch.matmul(qe, ke.transpose(-1, -2)) * scale + additive
        return torch.matmul(scores.softmax(-1), ve)

    return run_window, run_sdpa, run_eager


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--windows", type=int, nargs="+", default=[0, 1, 4, 16, 64])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="least timed runs after a warm-up; the best is reported")
    parser.add_argument("--min-seconds", type=float, default=1.0, help="keep repeating fast calls for this long")
    parser.add_argument("--eager-max-gib", type=float, default=1.0, help="largest L x L score tensor eager may build")
    parser.add_argument("--backend", default=None, help="backend of window_attention (default: fastest available)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    args = parser.parse_args()

    torch.manual_seed(0)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    backends = ops.backends()["window_attention"]
    where = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}, window_attention backends {backends}")
    timing = "median (CUDA events)" if device.type == "cuda" else "best"
    print(
        f"batch {args.batch}, heads {args.heads}, head dim {args.dim}, {args.dtype}, "
        f"{timing} of >= {args.repeats} runs (and >= {args.min_seconds} s) after a warm-up"
    )
    print()
    header = (
        "| L | w | window ms | SDPA ms | eager ms | SDPA/window time | eager/window time "
        "| window MiB | SDPA MiB | eager MiB | SDPA/window mem | eager/window mem |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    scale = 1.0 / math.sqrt(args.dim)
    mib = 2.0**20
    for length in args.lengths:
        q, k, v = (torch.randn(args.batch, args.heads, length, args.dim, device=device, dtype=dtype) for _ in range(3))
        # eager builds [batch, heads, L, L] scores; shrink its batch to fit the memory cap, then scale up
        eager_batch = args.batch
        score_bytes = args.heads * length * length * q.element_size()
        while eager_batch > 1 and eager_batch * score_bytes > args.eager_max_gib * 2**30:
            eager_batch //= 2
        factor = args.batch / eager_batch
        qe, ke, ve = q[:eager_batch], k[:eager_batch], v[:eager_batch]
        for window in args.windows:
            run_window, run_sdpa, run_eager = make_runs(q, k, v, (qe, ke, ve), window, scale, args.backend)

            with torch.inference_mode():
                expected = run_sdpa().float()
                error = (run_window().float() - expected).abs().max().item()
                if error > (1e-4 if dtype == torch.float32 else 3e-2):
                    raise SystemExit(f"window attention differs from SDPA by {error} at L={length}, w={window}")
                t_w, t_s, t_e = (
                    best_time(f, args.repeats, args.min_seconds, device) for f in (run_window, run_sdpa, run_eager)
                )
                m_w, m_s, m_e = (peak_bytes(f, device) / mib for f in (run_window, run_sdpa, run_eager))
            t_e, m_e = t_e * factor, m_e * factor
            star = "*" if factor > 1 else ""
            print(
                f"| {length} | {window} | {t_w * 1e3:.2f} | {t_s * 1e3:.1f} | {t_e * 1e3:.1f}{star} "
                f"| {t_s / t_w:.1f}x | {t_e / t_w:.1f}x{star} | {m_w:.1f} | {m_s:.1f} | {m_e:.0f}{star} "
                f"| {m_s / m_w:.2f}x | {m_e / m_w:.0f}x{star} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
