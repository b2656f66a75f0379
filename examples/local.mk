# examples/: small programs that use libkvpool as a model server would.

noinst_PROGRAMS = examples/kvpool-example-pages examples/kvpool-example-share
examples_kvpool_example_pages_SOURCES = examples/pages.c
examples_kvpool_example_pages_LDADD = client/libkvpool.la
examples_kvpool_example_share_SOURCES = examples/share.c
examples_kvpool_example_share_LDADD = client/libkvpool.la

# The example model server: a tiny deterministic transformer whose KV cache
# lives in shared kvpool pages: on the CPU with the kernels' C references,
# or, when the daemon's backend is cuda, on the GPU with cuBLAS and the
# CUDA kernels (model_cuda.cu). tests/check_demo runs it.
noinst_PROGRAMS += examples/kvpool-model-server
examples_kvpool_model_server_SOURCES = examples/model_server.c \
	examples/model.c examples/model.h examples/model_cuda.h \
	examples/model_seq.c examples/model_seq.h
examples_kvpool_model_server_LDADD = client/libkvpool.la -lm
if HAVE_CUDA
# through a convenience library: the .cu.lo rule of kernels/local.mk
# builds libtool objects, and automake has no rule of its own for .cu
noinst_LTLIBRARIES += examples/libmodelcuda.la
examples_libmodelcuda_la_SOURCES = examples/model_cuda.cu
examples_kvpool_model_server_LDADD += examples/libmodelcuda.la $(CUDA_LIBS)
else
examples_kvpool_model_server_SOURCES += examples/model_cuda_stub.c
endif
examples_kvpool_model_server_LDFLAGS = $(AM_LDFLAGS) -no-install
EXTRA_DIST += examples/demo.sh examples/model_server.py examples/demo_vllm.py \
	examples/vllm_engines.py examples/machines.py
