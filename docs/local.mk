# docs/: man pages and the protocol and design notes.
dist_man_MANS += docs/kvpoold.8 docs/kvpool.1 docs/libkvpool.3
EXTRA_DIST += docs/protocol.md docs/spill.md docs/cli.md docs/security.md docs/python.md \
	docs/vllm.md docs/sglang.md docs/metrics.md docs/deploy.md docs/events.md docs/remote.md \
	docs/architecture.md
