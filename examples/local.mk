# examples/: small programs that use libkvpool as a model server would.

noinst_PROGRAMS = examples/kvpool-example-pages examples/kvpool-example-share
examples_kvpool_example_pages_SOURCES = examples/pages.c
examples_kvpool_example_pages_LDADD = client/libkvpool.la
examples_kvpool_example_share_SOURCES = examples/share.c
examples_kvpool_example_share_LDADD = client/libkvpool.la
