# syntax=docker/dockerfile:1
# The engine replica image, two targets. Build from the repository root:
#   docker build -f docker/engine.Dockerfile --target cpu -t sluicegate-engine:cpu .
#   docker build -f docker/engine.Dockerfile --target gpu -t sluicegate-engine:gpu .
# No model is downloaded: mount a Hugging Face model folder at /models (or run `sluicegate make-tiny-model`).
ARG TORCH_VERSION=2.13.0

FROM python:3.11-slim AS base
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
RUN useradd --create-home --uid 1000 sluicegate

# CPU: the CPU-only torch wheel (about 200 MB instead of several GB of CUDA libraries).
FROM base AS cpu
ARG TORCH_VERSION
RUN pip install "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu
COPY pyproject.toml README.md ./
COPY sluicegate ./sluicegate
COPY engine ./engine
COPY kernels ./kernels
RUN pip install ".[engine,disagg]" && python -c "import engine.server.cli, engine.kv_transfer.nixl_connector"
USER sluicegate
EXPOSE 8100
CMD ["sluicegate", "engine", "--model", "/models/tiny", "--host", "0.0.0.0", "--port", "8100", "--device", "cpu"]

# GPU: the default Linux torch wheel bundles the CUDA runtime and Triton; the host needs only the NVIDIA driver
# and the NVIDIA Container Toolkit.
FROM base AS gpu
ARG TORCH_VERSION
RUN pip install "torch==${TORCH_VERSION}"
COPY pyproject.toml README.md ./
COPY sluicegate ./sluicegate
COPY engine ./engine
COPY kernels ./kernels
# NIXL for --kv-role prefill|decode: the meta package, which loads the build for torch's CUDA (12 or 13).
RUN pip install ".[engine,disagg-gpu]" && python -c "import engine.server.cli, engine.kv_transfer.nixl_connector"
USER sluicegate
EXPOSE 8100
CMD ["sluicegate", "engine", "--model", "/models/tiny", "--host", "0.0.0.0", "--port", "8100"]
