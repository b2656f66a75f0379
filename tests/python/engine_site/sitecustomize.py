# SPDX-License-Identifier: MIT
"""Imported at the start of every Python process of a `vllm serve` that
tests/python/test_pd.py starts with this folder first on PYTHONPATH: it
holds back the connector's saves off the step (a busy pool or disk), by
the seconds written in the file $KVPOOL_TEST_SAVE_DELAY_FILE names, read
before each save (by the saving thread without the GIL before each batch,
and while a batch waits), so that a test can slow a running engine's saver
and let it go again. It patches kvpool.vllm.worker when vLLM imports it, and does
nothing in a process without the variable."""
import importlib.abc
import importlib.util
import os
import sys
import threading
import time

_FILE = os.environ.get("KVPOOL_TEST_SAVE_DELAY_FILE")


def _delay():
    try:
        with open(_FILE) as f:
            return float(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def _slow(module):
    save = module.WorkerSide._save_off_step

    def slow(self, jobs):  # the Mover's saves (GPU tensors, hybrid models)
        seconds = _delay()
        if seconds > 0:
            time.sleep(seconds)
        return save(self, jobs)
    module.WorkerSide._save_off_step = slow
    # the saving thread without the GIL: its delay follows the file
    savers = []
    init = module.Saver.__init__

    def saver_init(self, *a, **kw):
        init(self, *a, **kw)
        self._c.delay = _delay()
        savers.append(self)
        if len(savers) == 1:
            threading.Thread(target=follow, daemon=True).start()

    def follow():
        while True:
            time.sleep(0.02)
            for s in savers:
                s._c.delay = _delay()
    module.Saver.__init__ = saver_init


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "kvpool.vllm.worker":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _slow(module)
        spec.loader.exec_module = exec_module
        return spec


if _FILE:
    sys.meta_path.insert(0, _Finder())
