# SPDX-License-Identifier: MIT
"""python -m kvpool.vllm check-config CONFIG - check the connector's part of
a `--kv-transfer-config` (CONFIG: that JSON, or its
kv_connector_extra_config alone) as an engine checks it at start, without
an engine: on a CPU, and on a GPU whose CUDA graphs are not full, vLLM
gives the connector its settings only once the model has loaded, so a
mistake found there costs a model load (on Kubernetes, one each restart).
Prints each setting's value and exits 0, or prints what is wrong and
exits 1."""
import json
import sys
from typing import List, Optional

from kvpool.vllm.settings import check_settings

ROLES = ("kv_both", "kv_producer", "kv_consumer")
USAGE = ("usage: python -m kvpool.vllm check-config CONFIG\n"
         "  CONFIG: vllm serve's --kv-transfer-config JSON, or its "
         "kv_connector_extra_config alone")


def check_config(text: str) -> List[str]:
    """What is wrong with CONFIG (empty: nothing), else ValueError."""
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise ValueError("kvpool: CONFIG is not JSON (%s): quote it for the shell as "
                         "vllm serve's argument is quoted" % e) from None
    if not isinstance(cfg, dict):
        raise ValueError("kvpool: CONFIG is a JSON %s, not an object" % type(cfg).__name__)
    if "kv_connector" not in cfg:  # the extra config alone
        check_settings(cfg)
        return []
    said = []
    if cfg["kv_connector"] != "KVPoolConnector":
        raise ValueError("kvpool: kv_connector is %r, not \"KVPoolConnector\"" %
                         (cfg["kv_connector"],))
    if cfg.get("kv_connector_module_path") != "kvpool.vllm":
        raise ValueError("kvpool: kv_connector_module_path is %r, not \"kvpool.vllm\": "
                         "vLLM would not find the connector" %
                         (cfg.get("kv_connector_module_path"),))
    if cfg.get("kv_role") not in ROLES:
        raise ValueError("kvpool: kv_role is %r, not one of %s" %
                         (cfg.get("kv_role"), ", ".join(ROLES)))
    if cfg.get("kv_load_failure_policy", "fail") != "recompute":
        said.append("note: kv_load_failure_policy is not \"recompute\": vLLM ends a request "
                    "whose load failed (an evicted block, a stopped kvpoold) with an error "
                    "instead of computing it")
    extra = cfg.get("kv_connector_extra_config")
    if extra is not None and not isinstance(extra, dict):
        raise ValueError("kvpool: kv_connector_extra_config is a JSON %s, not an object" %
                         type(extra).__name__)
    check_settings(extra)
    return said


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "check-config":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        notes = check_config(args[1])
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    cfg = json.loads(args[1])
    extra = cfg.get("kv_connector_extra_config") if "kv_connector" in cfg else cfg
    for k, v in check_settings(extra).items():
        print("%s = %s" % (k, "(computed at start)" if v is None else json.dumps(v)))
    for n in notes:
        print(n, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
