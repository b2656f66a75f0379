# SPDX-License-Identifier: MIT
"""Build kvpool._kvpool against libkvpool.

The version is kvpool's, one for every part: $KVPOOL_VERSION, else the
VERSION file of the tree above this directory, else pkg-config's.

libkvpool is found, in this order: KVPOOL_PREFIX (an install prefix; KVPOOL_LIBDIR names
its library directory when that is not PREFIX/lib, as Debian's multiarch
one), the kvpool build
tree this directory sits in (../include, ../client/.libs; the module then
records that library directory as its run path), or pkg-config kvpool.
KVPOOL_WERROR=1 makes compiler warnings errors (the test suite sets it).
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))
tree = os.path.dirname(here)
cflags = ["-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers",
          "-Wno-cast-function-type", "-fvisibility=hidden"]
if os.environ.get("KVPOOL_WERROR") == "1":
    cflags.append("-Werror")
include_dirs, library_dirs, runtime_dirs, extra_link = [], [], [], []

prefix = os.environ.get("KVPOOL_PREFIX")
if prefix:
    include_dirs.append(os.path.join(prefix, "include"))
    library_dirs.append(os.environ.get("KVPOOL_LIBDIR") or os.path.join(prefix, "lib"))
elif os.path.exists(os.path.join(tree, "include", "kvpool.h")) and \
        os.path.exists(os.path.join(tree, "client", ".libs")):
    include_dirs.append(os.path.join(tree, "include"))
    library_dirs.append(os.path.join(tree, "client", ".libs"))
    runtime_dirs.append(os.path.join(tree, "client", ".libs"))
else:
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs", "kvpool"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("kvpool: libkvpool not found: build kvpool first (its tree "
                         "above this directory), install it (pkg-config kvpool), or set "
                         "KVPOOL_PREFIX (%s)" % e)
    for f in shlex.split(out):
        if f.startswith("-I"):
            include_dirs.append(f[2:])
        elif f.startswith("-L"):
            library_dirs.append(f[2:])
        elif not f.startswith("-l"):
            extra_link.append(f)


def version():
    v = os.environ.get("KVPOOL_VERSION")
    if not v and os.path.exists(os.path.join(tree, "VERSION")):
        with open(os.path.join(tree, "VERSION")) as f:
            v = f.read().strip()
    if not v:
        try:
            v = subprocess.run(["pkg-config", "--modversion", "kvpool"], check=True,
                               capture_output=True, text=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    if not v:
        raise SystemExit("kvpool: no version: build from the kvpool tree (its VERSION "
                         "file), set KVPOOL_VERSION, or install kvpool (pkg-config)")
    return v


ver = version()
setup(version=ver, ext_modules=[Extension(
    "kvpool._kvpool", ["src/_kvpool.c", "src/client.c", "src/client_admin.c", "src/args.c",
                        "src/views.c", "src/kernels.c", "src/keys.c", "src/blockcopy.c",
                        "src/transfer.c", "src/saver.c"], include_dirs=include_dirs,
    library_dirs=library_dirs, runtime_library_dirs=runtime_dirs, libraries=["kvpool"],
    define_macros=[("KVPOOL_PY_VERSION", '"%s"' % ver)],
    extra_compile_args=cflags, extra_link_args=extra_link)])
