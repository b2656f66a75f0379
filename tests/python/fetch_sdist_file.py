# SPDX-License-Identifier: MIT
"""fetch_sdist_file.py PROJECT VERSION MEMBER OUT - one file of a release's
source distribution on PyPI, checked against the index's SHA-256.

The KV events tests decode kvpool's array encoding with the event classes
of vLLM 0.23 (the last release that sends arrays), which cannot be
installed beside the vLLM of the test environment: contrib/quickstart
fetches that one module with this script. Uses the PEP 503 simple index
(PIP_INDEX_URL when set)."""
import hashlib
import io
import os
import re
import sys
import tarfile
import urllib.request


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    project, version, member, out = sys.argv[1:]
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page = urllib.request.urlopen("%s/%s/" % (index, project), timeout=60).read().decode()
    name = "%s-%s.tar.gz" % (project, version)
    m = re.search(r'href="([^"#]*/%s)#sha256=([0-9a-f]{64})"' % re.escape(name), page)
    if not m:
        sys.exit("fetch_sdist_file: %s is not in %s/%s/" % (name, index, project))
    data = urllib.request.urlopen(m.group(1), timeout=300).read()
    if hashlib.sha256(data).hexdigest() != m.group(2):
        sys.exit("fetch_sdist_file: %s does not match the index's SHA-256" % name)
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        path = "%s-%s/%s" % (project, version, member)
        try:
            body = t.extractfile(path).read()
        except KeyError:
            sys.exit("fetch_sdist_file: %s has no %s" % (name, path))
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
