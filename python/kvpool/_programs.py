# SPDX-License-Identifier: MIT
"""The `kvpoold` and `kvpool` commands of a wheel built by `make wheel`:
each runs the program of that name that the wheel carries in kvpool/_bin/
(its shared libraries are in kvpool.libs/, found through its run path)."""
import os
import sys


def _run(name: str) -> None:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", name)
    if not os.path.exists(path):
        sys.exit("%s: this kvpool package carries no %s (%s): it was built from a source "
                 "tree; run that tree's %s, or install the wheel that `make wheel` makes"
                 % (name, name, path, "daemon/kvpoold" if name == "kvpoold" else "client/kvpool"))
    try:
        os.execv(path, [name] + sys.argv[1:])
    except OSError as e:
        sys.exit("%s: cannot run %s: %s" % (name, path, e.strerror))


def kvpoold() -> None:
    _run("kvpoold")


def kvpool() -> None:
    _run("kvpool")
