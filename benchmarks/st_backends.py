"""The CrossEncoder's own fast CPU backends, timed in their own virtualenv (issue 83.3): ``benchmarks/passages.py
--anchors PYTHON`` runs this file with that interpreter, so ONNX Runtime, OpenVINO and optimum never become
dependencies of the package (they pin other transformers versions).

Systems, all loading the same cross-encoder folder: the torch CrossEncoder in fp32 (the reference that ties this
virtualenv's timings to the main run), its ONNX Runtime backend in fp32 and as the dynamically quantized int8 export
(``export_dynamic_quantized_onnx_model``, AVX-512 VNNI config where the CPU has it), and its OpenVINO backend at its
default precision (bf16 inside on a CPU with AMX) and with int8 weights (``load_in_8bit``, no calibration data
needed). Each is timed like ``passages.py`` times its systems (one ``predict`` over all pairs per round, rounds
interleaved, best round kept). Prints one JSON object: ``{system: {"seconds": best, "scores": [...]}}``
(unavailable systems: ``{"error": why}``).

Set up once: ``python -m venv /tmp/anchors && /tmp/anchors/bin/pip install torch==2.13.0
'sentence-transformers[onnx,openvino]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path


def load_systems(folder: str, work: str) -> dict:
    """name -> CrossEncoder, or the error that kept it from loading."""
    from sentence_transformers import CrossEncoder

    systems: dict = {"CrossEncoder (torch fp32)": lambda: CrossEncoder(folder, device="cpu")}

    def onnx_int8():
        from sentence_transformers import export_dynamic_quantized_onnx_model

        copy = os.path.join(work, "onnx")
        shutil.copytree(folder, copy, dirs_exist_ok=True)
        model = CrossEncoder(copy, device="cpu", backend="onnx")
        flags = Path("/proc/cpuinfo").read_text() if os.path.exists("/proc/cpuinfo") else ""
        config = "avx512_vnni" if "avx512_vnni" in flags else "avx2"
        export_dynamic_quantized_onnx_model(model, config, copy)
        return CrossEncoder(
            copy, device="cpu", backend="onnx", model_kwargs={"file_name": f"onnx/model_qint8_{config}.onnx"}
        )

    systems["CrossEncoder (onnx fp32)"] = lambda: CrossEncoder(folder, device="cpu", backend="onnx")
    systems["CrossEncoder (onnx int8, dynamic)"] = onnx_int8
    # OpenVINO's default precision: bf16 inside on a CPU with AMX (its ranking is then the bf16 one)
    systems["CrossEncoder (openvino, default)"] = lambda: CrossEncoder(folder, device="cpu", backend="openvino")
    systems["CrossEncoder (openvino int8 weights)"] = lambda: CrossEncoder(
        folder, device="cpu", backend="openvino", model_kwargs={"load_in_8bit": True}
    )
    loaded = {}
    for name, make in systems.items():
        try:
            loaded[name] = make()
        except Exception as e:  # noqa: BLE001 - a backend that does not load is reported, not fatal
            loaded[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    return loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True)
    parser.add_argument("--pairs", required=True, help="JSON columns with query and text (passages.py --dump-pairs)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    columns = json.load(open(args.pairs))
    pairs = list(zip(columns["query"], columns["text"], strict=True))
    with tempfile.TemporaryDirectory() as work:
        systems = load_systems(args.folder, work)
        best, scores = {}, {}
        for _ in range(args.rounds):
            for name, model in systems.items():
                if isinstance(model, str):
                    continue
                start = time.perf_counter()
                scores[name] = np.asarray(model.predict(pairs, activation_fn=torch.nn.Identity())).tolist()
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    print(json.dumps({
        name: {"error": model} if isinstance(model, str) else {"seconds": best[name], "scores": scores[name]}
        for name, model in systems.items()
    }))  # fmt: skip


if __name__ == "__main__":
    main()
