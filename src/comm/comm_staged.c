/* "mpi-staged" backend: `--comm mpi` with `--device cuda` (built with LOOM_CUDA and LOOM_MPI).
 *
 * The MPI backend over device buffers: each group is a loom "mpi" comm (the host twin), and an
 * operation whose buffers are in device memory copies them into host memory, runs the MPI
 * operation there and copies the result back. Host buffers go to the twin as they are. It needs
 * no NCCL and no CUDA-aware MPI, and several ranks may share one GPU (NCCL refuses that): a
 * layout's GPU code can be checked on a machine with fewer GPUs than ranks. It is slow (every
 * byte crosses PCIe twice and nothing overlaps the compute), which the log says.
 *
 * Ordering with compute. The copies run on the compute stream (loom_comm_staged_set_stream) and
 * are waited for, so an operation starts after every kernel queued before it and returns with its
 * result in place: the backend is stream-ordered. The data-parallel iallreduce completes before
 * it returns. isend copies the message out at once and posts the twin's isend; irecv posts the
 * twin's irecv into host memory, and wait (or a test that finds it done) copies the message in.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "loom/tensor.h"

#define BACKEND "mpi-staged"

struct staged_req {
    struct loom_comm_req base;
    struct loom_comm_req *inner; /* the twin's request; NULL once it has completed */
    void *host;                  /* the message in host memory (malloc) */
    void *dev;                   /* receive: where it goes */
    size_t bytes;
};

static const struct loom_comm_ops g_staged_ops;

/* the compute stream, and one pinned buffer for the blocking operations */
static struct {
    cudaStream_t user;
    void *buf;
    size_t bytes;
} g;

void loom_comm_staged_set_stream(void *stream) {
    g.user = (cudaStream_t)stream;
}

static struct loom_comm *host_of(const struct loom_comm *c) {
    return (struct loom_comm *)c->impl;
}

static enum loom_status cuda_err(const char *what, cudaError_t e) {
    cudaGetLastError();
    return loom_fail(LOOM_ERR_COMM, BACKEND " comm: %s: %s", what, cudaGetErrorString(e));
}

#define CUDA_TRY(what, call)                                                                       \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return cuda_err(what, e_);                                          \
    } while (0)

static size_t nbytes(int64_t count, enum loom_dtype dt) {
    return count > 0 ? (size_t)count * loom_dtype_size(dt) : 0;
}

/* The pinned buffer, at least n bytes. */
static enum loom_status room(size_t n, char **out) {
    if (n > g.bytes) {
        if (g.buf) cudaFreeHost(g.buf);
        g.buf = NULL;
        g.bytes = 0;
        CUDA_TRY("pinned staging buffer", cudaMallocHost(&g.buf, n));
        g.bytes = n;
    }
    *out = g.buf;
    return LOOM_OK;
}

/* n bytes between device and host memory, after the work queued on the compute stream, and
 * finished on return. */
static enum loom_status copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    if (!n) return LOOM_OK;
    CUDA_TRY("cudaMemcpyAsync", cudaMemcpyAsync(dst, src, n, kind, g.user));
    CUDA_TRY("cudaStreamSynchronize", cudaStreamSynchronize(g.user));
    return LOOM_OK;
}

/* Host images of a receive buffer (rb bytes) and a send buffer (sb bytes), in the pinned
 * buffer, the send one filled, and the receive one too with keep (an operation that writes only
 * parts of it: what it leaves must come back unchanged): a buffer lying inside the other (the
 * in-place forms) keeps its offset inside the other's image. */
static enum loom_status images(void *recv, size_t rb, const void *send, size_t sb, int keep,
                               char **hr, const char **hs) {
    const uintptr_t r = (uintptr_t)recv, s = (uintptr_t)send;
    char *h = NULL;
    if (s >= r && s + sb <= r + rb) {
        LOOM_CHECK(room(rb, &h));
        LOOM_CHECK(copy(h, recv, rb, cudaMemcpyDeviceToHost));
        *hr = h;
        *hs = h + (s - r);
    } else if (r >= s && r + rb <= s + sb) {
        LOOM_CHECK(room(sb, &h));
        LOOM_CHECK(copy(h, send, sb, cudaMemcpyDeviceToHost));
        *hs = h;
        *hr = h + (r - s);
    } else {
        LOOM_CHECK(room(rb + sb, &h));
        if (keep) LOOM_CHECK(copy(h, recv, rb, cudaMemcpyDeviceToHost));
        LOOM_CHECK(copy(h + rb, send, sb, cudaMemcpyDeviceToHost));
        *hr = h;
        *hs = h + rb;
    }
    return LOOM_OK;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

static enum loom_status wrap(struct loom_comm **out, struct loom_comm *host) {
    *out = loom_comm_alloc(&g_staged_ops, host->rank, host->size, host);
    if (!*out) return loom_fail(LOOM_ERR_OOM, BACKEND " comm: out of memory");
    return LOOM_OK;
}

enum loom_status loom_comm_staged_world(struct loom_comm **out, int *argc, char ***argv) {
    *out = NULL;
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        cudaGetLastError();
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "--comm mpi with --device cuda: no CUDA device is "
                         "visible (%s)",
                         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    CUDA_TRY("cudaSetDevice", cudaSetDevice(loom_comm_local_rank() % ndev));
    struct loom_comm *host = NULL;
    LOOM_CHECK(loom_comm_mpi_world(&host, argc, argv));
    enum loom_status s = wrap(out, host);
    if (s != LOOM_OK) loom_comm_free(host);
    return s;
}

static enum loom_status staged_split(struct loom_comm **out, struct loom_comm *parent, int color,
                                     int key) {
    *out = NULL;
    struct loom_comm *host = NULL;
    LOOM_CHECK(loom_comm_split(&host, host_of(parent), color, key));
    if (!host) return LOOM_OK; /* color < 0 */
    enum loom_status s = wrap(out, host);
    if (s != LOOM_OK) loom_comm_free(host);
    return s;
}

static void staged_free(struct loom_comm *c) {
    loom_comm_free(host_of(c));
    c->impl = NULL;
}

/* ---- blocking operations --------------------------------------------------------------------- */

static enum loom_status staged_allreduce(struct loom_comm *c, void *buf, int64_t count,
                                         enum loom_dtype dt, enum loom_redop op) {
    int dev;
    LOOM_CHECK(loom_comm_where(BACKEND, "allreduce", buf, NULL, count, &dev));
    if (!dev) return loom_comm_allreduce(host_of(c), buf, count, dt, op);
    const size_t n = nbytes(count, dt);
    char *h = NULL;
    LOOM_CHECK(room(n, &h));
    LOOM_CHECK(copy(h, buf, n, cudaMemcpyDeviceToHost));
    LOOM_CHECK(loom_comm_allreduce(host_of(c), h, count, dt, op));
    return copy(buf, h, n, cudaMemcpyHostToDevice);
}

static enum loom_status staged_reduce_scatter(struct loom_comm *c, void *recv, const void *send,
                                              int64_t count, enum loom_dtype dt,
                                              enum loom_redop op) {
    int dev;
    LOOM_CHECK(loom_comm_where(BACKEND, "reduce_scatter", recv, send, count, &dev));
    if (!dev) return loom_comm_reduce_scatter(host_of(c), recv, send, count, dt, op);
    const size_t rb = nbytes(count, dt);
    char *hr = NULL;
    const char *hs = NULL;
    LOOM_CHECK(images(recv, rb, send, rb * (size_t)c->size, 0, &hr, &hs));
    LOOM_CHECK(loom_comm_reduce_scatter(host_of(c), hr, hs, count, dt, op));
    return copy(recv, hr, rb, cudaMemcpyHostToDevice);
}

static enum loom_status staged_allgather(struct loom_comm *c, void *recv, const void *send,
                                         int64_t count, enum loom_dtype dt) {
    int dev;
    LOOM_CHECK(loom_comm_where(BACKEND, "allgather", recv, send, count, &dev));
    if (!dev) return loom_comm_allgather(host_of(c), recv, send, count, dt);
    const size_t sb = nbytes(count, dt), rb = sb * (size_t)c->size;
    char *hr = NULL;
    const char *hs = NULL;
    LOOM_CHECK(images(recv, rb, send, sb, 0, &hr, &hs));
    LOOM_CHECK(loom_comm_allgather(host_of(c), hr, hs, count, dt));
    return copy(recv, hr, rb, cudaMemcpyHostToDevice);
}

static enum loom_status staged_alltoall(struct loom_comm *c, void *recv, const void *send,
                                        int64_t count, enum loom_dtype dt) {
    int dev;
    LOOM_CHECK(loom_comm_where(BACKEND, "alltoall", recv, send, count, &dev));
    if (!dev) return loom_comm_alltoall(host_of(c), recv, send, count, dt);
    const size_t b = nbytes(count, dt) * (size_t)c->size;
    char *hr = NULL;
    const char *hs = NULL;
    LOOM_CHECK(images(recv, b, send, b, 0, &hr, &hs));
    LOOM_CHECK(loom_comm_alltoall(host_of(c), hr, hs, count, dt));
    return copy(recv, hr, b, cudaMemcpyHostToDevice);
}

/* bytes up to the end of the furthest block */
static size_t extent(const int64_t *counts, const int64_t *displs, int n, enum loom_dtype dt) {
    int64_t end = 0;
    for (int r = 0; r < n; r++)
        if (counts[r] > 0 && displs[r] + counts[r] > end) end = displs[r] + counts[r];
    return nbytes(end, dt);
}

static enum loom_status staged_alltoallv(struct loom_comm *c, void *recv,
                                         const int64_t *recv_counts, const int64_t *recv_displs,
                                         const void *send, const int64_t *send_counts,
                                         const int64_t *send_displs, enum loom_dtype dt) {
    int64_t total = 0;
    for (int r = 0; r < c->size; r++)
        total += send_counts[r] + recv_counts[r];
    int dev;
    LOOM_CHECK(loom_comm_where(BACKEND, "alltoallv", recv, send, total, &dev));
    if (!dev)
        return loom_comm_alltoallv(host_of(c), recv, recv_counts, recv_displs, send, send_counts,
                                   send_displs, dt);
    const size_t rb = extent(recv_counts, recv_displs, c->size, dt);
    const size_t sb = extent(send_counts, send_displs, c->size, dt);
    char *hr = NULL;
    const char *hs = NULL;
    /* the blocks may leave gaps in recv, which must keep their contents */
    LOOM_CHECK(images(recv, rb, send, sb, 1, &hr, &hs));
    LOOM_CHECK(loom_comm_alltoallv(host_of(c), hr, recv_counts, recv_displs, hs, send_counts,
                                   send_displs, dt));
    return copy(recv, hr, rb, cudaMemcpyHostToDevice);
}

static enum loom_status staged_broadcast(struct loom_comm *c, void *buf, int64_t count,
                                         enum loom_dtype dt, int root) {
    int dev;
    LOOM_CHECK(loom_comm_where(BACKEND, "broadcast", buf, NULL, count, &dev));
    if (!dev) return loom_comm_broadcast(host_of(c), buf, count, dt, root);
    const size_t n = nbytes(count, dt);
    char *h = NULL;
    LOOM_CHECK(room(n, &h));
    if (c->rank == root) LOOM_CHECK(copy(h, buf, n, cudaMemcpyDeviceToHost));
    LOOM_CHECK(loom_comm_broadcast(host_of(c), h, count, dt, root));
    return c->rank == root ? LOOM_OK : copy(buf, h, n, cudaMemcpyHostToDevice);
}

static enum loom_status staged_send(struct loom_comm *c, const void *buf, int64_t count,
                                    enum loom_dtype dt, int peer, int tag) {
    int dev;
    LOOM_CHECK(loom_comm_where(BACKEND, "send", buf, NULL, count, &dev));
    if (!dev) return loom_comm_send(host_of(c), buf, count, dt, peer, tag);
    const size_t n = nbytes(count, dt);
    char *h = NULL;
    LOOM_CHECK(room(n, &h));
    LOOM_CHECK(copy(h, buf, n, cudaMemcpyDeviceToHost));
    return loom_comm_send(host_of(c), h, count, dt, peer, tag);
}

static enum loom_status staged_recv(struct loom_comm *c, void *buf, int64_t count,
                                    enum loom_dtype dt, int peer, int tag) {
    int dev;
    LOOM_CHECK(loom_comm_where(BACKEND, "recv", buf, NULL, count, &dev));
    if (!dev) return loom_comm_recv(host_of(c), buf, count, dt, peer, tag);
    const size_t n = nbytes(count, dt);
    char *h = NULL;
    LOOM_CHECK(room(n, &h));
    LOOM_CHECK(loom_comm_recv(host_of(c), h, count, dt, peer, tag));
    return copy(buf, h, n, cudaMemcpyHostToDevice);
}

static enum loom_status staged_barrier(struct loom_comm *c) {
    return loom_comm_barrier(host_of(c));
}

/* ---- non-blocking operations ----------------------------------------------------------------- */

static enum loom_status new_req(struct staged_req **out, size_t bytes) {
    struct staged_req *r = calloc(1, sizeof *r);
    if (r && bytes) r->host = malloc(bytes);
    if (!r || (bytes && !r->host)) {
        free(r);
        return loom_fail(LOOM_ERR_OOM, BACKEND " comm: out of memory for a %zu-byte message",
                         bytes);
    }
    r->base.ops = &g_staged_ops;
    r->bytes = bytes;
    *out = r;
    return LOOM_OK;
}

static void free_req(struct staged_req *r) {
    free(r->host);
    free(r);
}

/* completes before it returns (a request that is done) */
static enum loom_status staged_iallreduce(struct loom_comm *c, void *buf, int64_t count,
                                          enum loom_dtype dt, enum loom_redop op,
                                          struct loom_comm_req **req) {
    struct staged_req *r = NULL;
    LOOM_CHECK(new_req(&r, 0));
    enum loom_status s = staged_allreduce(c, buf, count, dt, op);
    if (s != LOOM_OK) {
        free_req(r);
        return s;
    }
    *req = &r->base;
    return LOOM_OK;
}

/* completes before it returns: the buffer through host memory, the twin's in-place form, this
 * rank's block back */
static enum loom_status staged_ireduce_scatter(struct loom_comm *c, void *buf, int64_t count,
                                               enum loom_dtype dt, enum loom_redop op,
                                               struct loom_comm_req **req) {
    int dev;
    LOOM_CHECK(loom_comm_where(BACKEND, "ireduce_scatter", buf, NULL, count, &dev));
    if (!dev) return loom_comm_ireduce_scatter(host_of(c), buf, count, dt, op, req);
    const size_t b = nbytes(count, dt);
    char *h = NULL;
    LOOM_CHECK(room(b * (size_t)c->size, &h));
    LOOM_CHECK(copy(h, buf, b * (size_t)c->size, cudaMemcpyDeviceToHost));
    struct loom_comm_req *inner = NULL;
    LOOM_CHECK(loom_comm_ireduce_scatter(host_of(c), h, count, dt, op, &inner));
    LOOM_CHECK(loom_comm_wait(inner));
    const size_t own = b * (size_t)c->rank;
    LOOM_CHECK(copy((char *)buf + own, h + own, b, cudaMemcpyHostToDevice));
    struct staged_req *r = NULL;
    LOOM_CHECK(new_req(&r, 0));
    *req = &r->base;
    return LOOM_OK;
}

/* completes before it returns (the blocking form, in place) */
static enum loom_status staged_iallgather(struct loom_comm *c, void *buf, int64_t count,
                                          enum loom_dtype dt, struct loom_comm_req **req) {
    struct staged_req *r = NULL;
    LOOM_CHECK(new_req(&r, 0));
    enum loom_status s =
        staged_allgather(c, buf, (char *)buf + nbytes(count, dt) * (size_t)c->rank, count, dt);
    if (s != LOOM_OK) {
        free_req(r);
        return s;
    }
    *req = &r->base;
    return LOOM_OK;
}

static enum loom_status staged_isend(struct loom_comm *c, const void *buf, int64_t count,
                                     enum loom_dtype dt, int peer, int tag,
                                     struct loom_comm_req **req) {
    int dev;
    LOOM_CHECK(loom_comm_where(BACKEND, "isend", buf, NULL, count, &dev));
    if (!dev) return loom_comm_isend(host_of(c), buf, count, dt, peer, tag, req);
    struct staged_req *r = NULL;
    LOOM_CHECK(new_req(&r, nbytes(count, dt)));
    enum loom_status s = copy(r->host, buf, r->bytes, cudaMemcpyDeviceToHost);
    if (s == LOOM_OK) s = loom_comm_isend(host_of(c), r->host, count, dt, peer, tag, &r->inner);
    if (s != LOOM_OK) {
        free_req(r);
        return s;
    }
    *req = &r->base;
    return LOOM_OK;
}

static enum loom_status staged_irecv(struct loom_comm *c, void *buf, int64_t count,
                                     enum loom_dtype dt, int peer, int tag,
                                     struct loom_comm_req **req) {
    int dev;
    LOOM_CHECK(loom_comm_where(BACKEND, "irecv", buf, NULL, count, &dev));
    if (!dev) return loom_comm_irecv(host_of(c), buf, count, dt, peer, tag, req);
    struct staged_req *r = NULL;
    LOOM_CHECK(new_req(&r, nbytes(count, dt)));
    r->dev = buf;
    enum loom_status s = loom_comm_irecv(host_of(c), r->host, count, dt, peer, tag, &r->inner);
    if (s != LOOM_OK) {
        free_req(r);
        return s;
    }
    *req = &r->base;
    return LOOM_OK;
}

/* a request whose twin has completed: a receive's message copied in, then freed */
static enum loom_status finish(struct staged_req *r) {
    enum loom_status s = r->dev ? copy(r->dev, r->host, r->bytes, cudaMemcpyHostToDevice) : LOOM_OK;
    free_req(r);
    return s;
}

static enum loom_status staged_wait(struct loom_comm_req *req) {
    struct staged_req *r = (struct staged_req *)req;
    if (r->inner) {
        enum loom_status s = loom_comm_wait(r->inner);
        r->inner = NULL;
        if (s != LOOM_OK) {
            free_req(r);
            return s;
        }
    }
    return finish(r);
}

static enum loom_status staged_test(struct loom_comm_req *req, int *done) {
    struct staged_req *r = (struct staged_req *)req;
    *done = 0;
    if (r->inner) {
        int d = 0;
        enum loom_status s = loom_comm_test(r->inner, &d);
        if (s != LOOM_OK) return s;
        if (!d) return LOOM_OK;
        r->inner = NULL; /* the twin freed its request */
    }
    *done = 1;
    return finish(r);
}

static const struct loom_comm_ops g_staged_ops = {
    .name = BACKEND,
    .stream_ordered = 1,
    .device_memory = 1,
    .split = staged_split,
    .free = staged_free,
    .allreduce = staged_allreduce,
    .reduce_scatter = staged_reduce_scatter,
    .allgather = staged_allgather,
    .alltoall = staged_alltoall,
    .alltoallv = staged_alltoallv,
    .broadcast = staged_broadcast,
    .send = staged_send,
    .recv = staged_recv,
    .barrier = staged_barrier,
    .iallreduce = staged_iallreduce,
    .ireduce_scatter = staged_ireduce_scatter,
    .iallgather = staged_iallgather,
    .isend = staged_isend,
    .irecv = staged_irecv,
    .wait = staged_wait,
    .test = staged_test,
};
