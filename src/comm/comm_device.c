/* Where a buffer given to a collective lives, for the backends that take device memory (nccl,
 * mpi-staged): device (or managed) memory or host memory, by cudaPointerGetAttributes. */
#include <cuda_runtime_api.h>

#include "comm/comm_impl.h"

int loom_comm_on_device(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

enum loom_status loom_comm_where(const char *backend, const char *what, const void *a,
                                 const void *b, int64_t count, int *dev) {
    *dev = 0;
    if (count <= 0) return LOOM_OK;
    int da = loom_comm_on_device(a);
    if (b && b != a && loom_comm_on_device(b) != da)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "%s: one buffer is in device memory and the other in host memory; the "
                         "%s backend needs both on the same side",
                         what, backend);
    *dev = da;
    return LOOM_OK;
}
