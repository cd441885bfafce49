#include "loom/backend.h"

#include <stdio.h>
#include <string.h>

enum loom_status loom_backend_create(struct loom_backend **out, const char *name, int device_index) {
    if (strcmp(name, "cpu") == 0) return loom_backend_cpu_create(out);
    if (strcmp(name, "cuda") == 0) return loom_backend_cuda_create(out, device_index);
    return loom_fail(LOOM_ERR_INVALID_ARG, "--device: unknown device '%s'; valid: cpu, cuda", name);
}

void loom_backend_destroy(struct loom_backend *be) {
    if (be && be->ops->destroy) be->ops->destroy(be);
}

_Noreturn void loom_backend_missing_op(const struct loom_backend *be, const char *op) {
    loom_abort(__FILE__, __LINE__, "op %s is not supported on %s", op, be->ops->name);
}

#ifndef LOOM_HAVE_CUDA
enum loom_status loom_backend_cuda_create(struct loom_backend **out, int device_index) {
    (void)out;
    (void)device_index;
    return loom_fail(LOOM_ERR_UNSUPPORTED,
                     "--device cuda: this loom was built without CUDA; rebuild with -DLOOM_CUDA=ON "
                     "or use --device cpu");
}
#endif
