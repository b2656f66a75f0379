# SPDX-License-Identifier: MIT
"""The `kvpoold` and `kvpool` commands of a wheel built by `make wheel`:
each runs the program of that name that the wheel carries in kvpool/_bin/
(its shared libraries are in kvpool.libs/, found through its run path).
`kvpoold --version --verbose` adds the libraries the wheel bundles, from
its SBOM (PEP 770: .dist-info/sboms/, which auditwheel writes): frozen
copies that no OS update reaches."""
import json
import os
import subprocess
import sys
from typing import List, Tuple


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


def bundled() -> List[Tuple[str, str, str]]:
    """(name, version, purl) of each library the installed wheel bundles,
    from its SBOMs; empty for a package built from a source tree."""
    from importlib import metadata
    try:
        files = metadata.distribution("kvpool").files or []
    except metadata.PackageNotFoundError:
        return []
    out = []
    for f in files:
        parts = str(f).replace("\\", "/").split("/")
        if len(parts) < 3 or parts[-2] != "sboms" or not parts[-1].endswith(".json"):
            continue
        try:
            bom = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        for c in bom.get("components", []):
            purl = c.get("purl", "")
            if not purl.startswith("pkg:pypi/kvpool@"):
                out.append((c.get("name", "?"), c.get("version", "?"), purl))
    return sorted(set(out))


def kvpoold() -> None:
    args = sys.argv[1:]
    if ("--version" in args or "-V" in args) and "--verbose" in args:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "kvpoold")
        if os.path.exists(path):
            r = subprocess.run([path] + args, stdout=subprocess.PIPE, text=True)
            sys.stdout.write(r.stdout)
            if r.returncode != 0:
                sys.exit(r.returncode)
            libs = bundled()
            print("bundled in this wheel (its SBOM; no OS update reaches them: install "
                  "a newer wheel):" if libs else "bundled in this wheel: none named by an SBOM")
            for name, version, purl in libs:
                print("  %s %s (%s)" % (name, version, purl))
            sys.stdout.flush()
            return
    _run("kvpoold")


def kvpool() -> None:
    _run("kvpool")
