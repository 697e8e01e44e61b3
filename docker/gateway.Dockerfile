# syntax=docker/dockerfile:1
# The gateway image: no torch, no triton (the gateway never imports them). Build from the repository root:
#   docker build -f docker/gateway.Dockerfile -t sluicegate-gateway .
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# Dependencies first (a layer that survives source edits): pyproject's base list, torch-free by design (the
# engine's torch and Triton are in the `engine` extra, which this image never installs).
COPY pyproject.toml README.md docker/requirements.py ./
RUN python requirements.py pyproject.toml > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt

COPY sluicegate ./sluicegate
COPY gateway ./gateway
COPY guardrails ./guardrails
COPY config ./config
RUN pip install --no-deps . \
 && python -c "import sys; sys.modules['torch'] = None; import gateway.cli, gateway.app" \
 && useradd --create-home --uid 1000 sluicegate

USER sluicegate
EXPOSE 8000
CMD ["sluicegate", "gateway", "--config", "/etc/sluicegate/gateway.yaml"]
