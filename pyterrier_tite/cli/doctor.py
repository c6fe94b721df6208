"""``pyterrier-tite doctor``: the environment in one report, to paste into a bug report (versions, the kernel each op
runs on, what the CPU computes natively, CUDA / Triton, where caches live). It compiles the CPU kernels first when
this torch has none yet, so it is also the ahead-of-time build."""

from __future__ import annotations

import argparse
import os
import platform
import sys

#: distribution name -> what the report calls it
PACKAGES = {
    "pyterrier-tite": "pyterrier-tite", "torch": "torch", "transformers": "transformers",
    "pyterrier": "pyterrier", "pyterrier-alpha": "pyterrier-alpha", "pyterrier-dr": "pyterrier_dr",
    "pyterrier-pisa": "pyterrier_pisa", "ir_datasets": "ir_datasets", "triton": "triton", "ninja": "ninja",
}  # fmt: skip
#: /proc/cpuinfo flags -> what they mean for the kernels
CPU_FLAGS = {"native bf16": ("avx512_bf16", "amx_bf16"), "VNNI (int8)": ("avx512_vnni", "avx_vnni"),
             "AMX": ("amx_tile",)}  # fmt: skip


def register(commands: argparse._SubParsersAction) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="report versions, kernel backends, CPU features, CUDA and cache folders (compiles the CPU kernels "
        "if this torch has none yet)",
    )
    doctor.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(report())
    return 0


def report() -> str:
    """The report: four sections of ``name: value`` lines."""
    import torch

    from pyterrier_tite import ops
    from pyterrier_tite.devices import cpu_flags
    from pyterrier_tite.ops import _extension, int8_rows  # noqa: F401  (int8_rows: registers its backends)

    flags = cpu_flags()
    hardware = {
        "CPU": f"{_cpu_model()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, ATen capability "
        f"{torch.backends.cpu.get_cpu_capability()}",
        **{what: "yes" if flags & set(names) else "no" for what, names in CPU_FLAGS.items()},
        "CUDA": _cuda(torch),
        "Triton kernels": "yes" if _extension.has_triton() else "no (they run on CUDA devices)",
    }
    compiled = ops.extension()  # compiles them now if this torch has none yet
    kernels = {"CPU kernels": "compiled" if compiled is not None else "NOT compiled: the pure-torch reference runs"}
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    for op, names in ops.backends().items():
        chosen = ", ".join(f"{d.type} -> {_chosen(_extension, op, d)}" for d in devices)
        kernels[op] = f"{chosen} (available: {', '.join(names)})"
    from huggingface_hub import constants

    from pyterrier_tite.store.cache import cache_root

    sources = _extension.sources()
    caches = {
        "PYTERRIER_TITE_HOME": cache_root() + ("" if os.environ.get("PYTERRIER_TITE_HOME") else " (default)"),
        "compiled kernels": _extension.build_folder(sources) if sources else "none (no csrc/ sources)",
        "PyTerrier artifacts": os.path.join(os.environ.get("PYTERRIER_HOME") or os.path.expanduser("~/.pyterrier"),
                                            "artifacts"),  # fmt: skip
        "HF_HOME": constants.HF_HOME,
        "IR_DATASETS_HOME": os.environ.get("IR_DATASETS_HOME") or os.path.expanduser("~/.ir_datasets"),
    }
    versions = {"python": f"{platform.python_version()} ({sys.executable})", "platform": platform.platform(),
                **{name: installed_version(dist) for dist, name in PACKAGES.items()}}  # fmt: skip
    sections = {"versions": versions, "hardware": hardware, "kernels (backend chosen per device)": kernels,
                "caches": caches}  # fmt: skip
    return "\n".join(title + "".join(f"\n  {k}: {v}" for k, v in part.items()) for title, part in sections.items())


def installed_version(dist: str, missing: str = "not installed") -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return missing


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith("model name")), "")
    except OSError:
        line = ""
    return line.partition(":")[2].strip() or platform.processor() or "unknown"


def _cuda(torch) -> str:
    if not torch.cuda.is_available():
        return f"not available (torch built with CUDA {torch.version.cuda})" if torch.version.cuda else "no (CPU build)"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"CUDA {torch.version.cuda}, {len(names)} device(s): {', '.join(names)}"


def _chosen(extension, op: str, device) -> str:
    try:
        return extension.choose_backend(op, device, None)
    except (ValueError, RuntimeError) as exc:  # $PYTERRIER_TITE_BACKEND names one that is unknown or missing here
        return f"error: {exc}"
