# kernels/: the KV-cache kernels. The C references always build into
# libkvpool (they are the CPU path); the CUDA launchers build with nvcc when
# configure found CUDA, else stubs that return -ENOTSUP take their place.

noinst_HEADERS += kernels/cuda_check.h kernels/kern_check.h kernels/kv_dtype.h
client_libkvpool_la_SOURCES += kernels/copy_pages_ref.c kernels/kern_check.c \
	kernels/paged_attention_ref.c kernels/write_kv_ref.c
# expf() of the attention reference.
client_libkvpool_la_LIBADD += -lm

if HAVE_CUDA
client_libkvpool_la_SOURCES += kernels/copy_pages.cu \
	kernels/paged_attention.cu kernels/write_kv.cu
client_libkvpool_la_LIBADD += $(CUDA_LIBS)
else
client_libkvpool_la_SOURCES += kernels/cuda_stubs.c
endif

# nvcc compiles .cu files into libtool objects through one wrapper: nvcc
# refuses a bare -fPIC and knows nothing of .lo files.
SUFFIXES += .cu .lo
NVCC_FLAGS = -std=c++17 -O3 $(NVCC_ARCHFLAGS) -I$(top_srcdir)/include \
	-Xcompiler -fvisibility=hidden -Xcompiler -Wall \
	-Xcompiler -Wextra -Xcompiler -Wno-unused-parameter
AM_V_NVCC = $(am__v_NVCC_@AM_V@)
am__v_NVCC_ = $(am__v_NVCC_@AM_DEFAULT_V@)
am__v_NVCC_0 = @echo "  NVCC    " $@;
am__v_NVCC_1 =
.cu.lo:
	$(AM_V_NVCC)$(SHELL) $(top_srcdir)/build-aux/nvcc-lt $@ \
		$(NVCC) $(NVCC_FLAGS) -c $<
EXTRA_DIST += build-aux/nvcc-lt
# The kernels' notes and their GPU check (tests/gpu/kernel_bench.c and
# tests/cuda_attention.c are distributed as sources of check programs).
EXTRA_DIST += docs/kv-layout.md tests/gpu/device-check.sh
