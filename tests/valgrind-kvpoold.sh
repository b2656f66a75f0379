#!/bin/sh
# SPDX-License-Identifier: MIT
# valgrind-kvpoold.sh - kvpoold under valgrind's memcheck, for `make
# check-valgrind`: any memory error or leak makes it exit 99, which the
# tests see as an unclean shutdown. The daemon takes the epoll loop
# (KVPOOL_IO=sync): memcheck cannot see what io_uring writes into memory.
real=${KVPOOLD_REAL:?set KVPOOLD_REAL to the kvpoold to run}
KVPOOL_IO=sync exec valgrind --quiet --tool=memcheck --leak-check=full \
	--show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
	--error-exitcode=99 --track-fds=no --child-silent-after-fork=yes \
	"$real" "$@"
