# TIRA / TIREx code submission of pyterrier-tite (see docs/tirex.md). Not built in this project's CI: it needs the
# network (base image, torch, the model's weights), which TIRA's build has and the container run does not.
#
#   docker build -t pyterrier-tite-tirex --build-arg MODEL=webis/sparse-cross-encoder-4-512 .
#   docker run --rm -v "$PWD/in:/in:ro" -v "$PWD/out:/out" -e inputDataset=/in -e outputDir=/out pyterrier-tite-tirex
#
# A CUDA build: --build-arg BASE=pytorch/pytorch:<tag>-cuda12.6-cudnn9-runtime --build-arg TORCH_INDEX_URL=
ARG BASE=python:3.11-slim
FROM ${BASE}

# a C++ compiler for the package's CPU kernels (csrc/, compiled for the torch installed first)
RUN apt-get update && apt-get install -y --no-install-recommends g++ && rm -rf /var/lib/apt/lists/*

ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN if python -c "import torch" 2>/dev/null; then echo "torch from the base image"; \
    elif [ -n "$TORCH_INDEX_URL" ]; then pip install --no-cache-dir "$TORCH_SPEC" --index-url "$TORCH_INDEX_URL"; \
    else pip install --no-cache-dir "$TORCH_SPEC"; fi

WORKDIR /opt/pyterrier-tite
COPY . .
# the tirex extra: ir-metadata.yml recorded by tirex-tracker, as TIREx records it; `doctor` compiles the CPU kernels
# now, into a folder of the image, so that no run of the container compiles them
ENV TORCH_EXTENSIONS_DIR=/opt/torch_extensions
RUN pip install --no-cache-dir ".[tirex]" && pyterrier-tite doctor

# The weights are fetched now, at build time: TIRA runs the container without network.
ARG MODEL=webis/sparse-cross-encoder-4-512
ENV MODEL=${MODEL} HF_HOME=/opt/hf
RUN if [ "$MODEL" != "bm25" ]; then python -c "import os, pyterrier_tite as t; t.load(os.environ['MODEL'], device='cpu')"; fi
ENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

# TIRA sets $inputDataset and $outputDir; a submission's --command may choose `tirex retrieve` instead.
CMD ["sh", "-c", "pyterrier-tite tirex rerank --model \"$MODEL\""]
