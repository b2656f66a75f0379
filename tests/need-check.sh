#!/bin/sh
# Run by `make check` when configure did not find Check.
echo "kvpool's tests need the Check unit-test framework, which configure did not find." >&2
echo "Install it (Debian/Ubuntu: apt-get install check), then run ./configure again." >&2
exit 1
