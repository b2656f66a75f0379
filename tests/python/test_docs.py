# SPDX-License-Identifier: MIT
"""docs/python.md's code blocks, run as written: what a reader copies must
work. The Python blocks run against a real kvpoold ($KVPOOL_SOCKET, as the
page says); the install from the source tree runs in a folder laid out as
the tree (python/ copied, VERSION, include/ and client/ this build's). The wheel's
block runs in test_wheel.py, which makes the wheel."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import TOP, Daemon, doc_blocks

BUILD = os.environ.get("KVPOOL_BUILDDIR", TOP)
BLOCKS = doc_blocks("python.md")


def test_the_page_has_the_blocks_this_test_knows():
    langs = [lang for lang, _ in BLOCKS]
    assert langs.count("python") >= 1 and langs.count("sh") == 2, BLOCKS
    assert "pip install kvpool-" in BLOCKS[0][1] and "pip install ./python" in BLOCKS[1][1]


@pytest.mark.parametrize("n", [i for i, (lang, _) in enumerate(BLOCKS) if lang == "python"])
def test_a_python_block_runs_as_written_twice(n):
    pytest.importorskip("torch")
    pytest.importorskip("numpy")
    d = Daemon(args=["--pool-size", "64M", "--slab-size", "8M"])
    try:
        # the kvpool package this suite tests (a reader's: installed)
        path = os.pathsep.join(p for p in (os.path.join(TOP, "python"),
                                           os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, KVPOOL_SOCKET=d.sock, PYTHONPATH=path)
        for _ in range(2):  # the second run finds what the first published
            r = subprocess.run([sys.executable, "-c", BLOCKS[n][1]], env=env, cwd=d.dir,
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, BLOCKS[n][1] + r.stderr
        assert d.stats()["pages_private"] == 0
        d.stop()
    finally:
        d.discard()  # its directory too (it left one behind a run)


def test_the_install_from_the_source_tree_works_as_written(tmp_path):
    """`python3 -m venv venv && venv/bin/pip install ./python`, in the tree's
    root, then `import kvpool` from that venv (pip builds the extension)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copytree(os.path.join(TOP, "python"), str(tree / "python"),
                    ignore=shutil.ignore_patterns("build", "*.so", "*.egg-info", "__pycache__"))
    os.symlink(os.path.join(TOP, "include"), str(tree / "include"))
    os.symlink(os.path.join(TOP, "VERSION"), str(tree / "VERSION"))
    os.symlink(os.path.join(BUILD, "client"), str(tree / "client"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # python3: this interpreter's (the page's python3 on a reader's PATH)
    bindir = os.path.join(tmp_path, "bin")
    os.mkdir(bindir)
    os.symlink(sys.executable, os.path.join(bindir, "python3"))
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    r = subprocess.run(["sh", "-ec", BLOCKS[1][1]], cwd=str(tree), env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(tree / "venv" / "bin" / "python"), "-c",
                        "import kvpool; print(kvpool.__file__, kvpool.Client)"],
                       cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and str(tree / "venv") in r.stdout, r.stdout + r.stderr
