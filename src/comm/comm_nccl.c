/* "nccl" backend: device buffers through NCCL, host buffers through MPI (built with LOOM_CUDA and
 * LOOM_MPI where CMake finds nccl.h and libnccl).
 *
 * Each group is an MPI group (the "host twin", a loom "mpi" comm over the same ranks) plus two
 * NCCL communicators. Every operation looks at where its buffers live
 * (cudaPointerGetAttributes): device (or managed) memory goes through NCCL, host memory through
 * the MPI twin. That is how the few host scalars the model and the trainer reduce (loss sums,
 * squared norms, vocabulary-parallel softmax statistics) keep working unchanged under NCCL, at
 * MPI's latency, with no staging copy through the GPU. Both ends of a message must use the same
 * kind of memory; one operation's buffers must all be on the same side.
 *
 * Ordering with compute. All NCCL work of the process runs on one communication stream (one
 * device per process). loom_comm_set_stream names the compute stream: an operation first makes
 * the communication stream wait for what is queued on the compute stream (an event), and a
 * blocking operation then makes the compute stream wait for its result, so it returns as soon
 * as it is queued. Non-blocking operations record an event instead: wait makes the compute
 * stream wait for it, test queries it. Because the communication stream is not the compute
 * stream, a data-parallel reduction started with iallreduce overlaps the rest of the backward
 * pass. One stream for every group keeps all NCCL kernels of a rank in one order, the order in
 * which the program issues them, as NCCL asks of several communicators.
 *
 * Point-to-point. NCCL matches the sends and receives between two ranks in issue order and has
 * no tags, and a send kernel may wait for its receiver, so two ranks that each send before they
 * receive could each block their stream on their send. Hence:
 *   - isend and irecv do not launch: they record the compute stream's position (the data to send
 *     is ready, the buffer to receive into is free) and join a pending list. The first wait or
 *     test, or any other operation, launches everything pending in one ncclGroupStart/End, so
 *     those sends and receives progress together (as Megatron's batched send/receive). Post the
 *     operations of an exchange, then wait: a rank that blocks on something else with a
 *     receive still pending holds back the peer's send.
 *   - tags select one of two NCCL communicators by their parity (even: the one collectives use,
 *     odd: a copy). Messages of one parity between two ranks are received in the order they
 *     were sent, whatever their tags; the pipeline puts the direction of a message (activation
 *     or gradient) in the low bit of its tag, and within a direction its schedules send and
 *     receive in one order.
 *
 * Splits: the host twin splits with MPI_Comm_split and each NCCL communicator with
 * ncclCommSplit (same color and key, so the ranks agree; checked).
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "loom/log.h"

#define NCCL_CLASSES 2

struct nccl_state {
    ncclComm_t nc[NCCL_CLASSES]; /* [0]: collectives and even tags, [1]: odd tags */
    struct loom_comm *host;      /* MPI twin over the same ranks */
};

struct nccl_req {
    struct loom_comm_req base;
    cudaEvent_t done; /* recorded on the communication stream after the operation */
    /* a send or receive not launched yet */
    int pending, is_recv;
    cudaEvent_t ready; /* the compute stream's position when it was posted */
    ncclComm_t nc;
    void *buf;
    size_t bytes;
    int peer;
};

static const struct loom_comm_ops g_nccl_ops;

/* Process-wide state: the streams, two reusable events, a pool of request events, the pending
 * sends and the staging buffer of in-place all-to-alls. */
static struct {
    int ready;
    cudaStream_t comm, user;
    cudaEvent_t in, out;
    cudaEvent_t *pool;
    int npool, cappool;
    struct nccl_req **pending;
    int npending, cappending;
    void *tmp;
    size_t tmp_bytes;
} g;

static enum loom_status nccl_err(const char *what, ncclResult_t r, ncclComm_t comm) {
    const char *last = ncclGetLastError(comm);
    return loom_fail(LOOM_ERR_COMM, "%s: NCCL error %d: %s%s%s", what, (int)r,
                     ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

static enum loom_status cuda_err(const char *what, cudaError_t e) {
    return loom_fail(LOOM_ERR_COMM, "%s: CUDA error %s: %s", what, cudaGetErrorName(e),
                     cudaGetErrorString(e));
}

#define NCCL_TRY(what, comm, call)                                                            \
    do {                                                                                      \
        ncclResult_t r_ = (call);                                                             \
        if (r_ != ncclSuccess) return nccl_err(what, r_, comm);                               \
    } while (0)

#define CUDA_TRY(what, call)                                                                  \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) return cuda_err(what, e_);                                     \
    } while (0)

void loom_comm_nccl_set_stream(void *stream) { g.user = (cudaStream_t)stream; }

static struct nccl_state *state_of(const struct loom_comm *c) {
    return (struct nccl_state *)c->impl;
}

static ncclComm_t nccl_of(const struct loom_comm *c, int tag) {
    return state_of(c)->nc[tag & 1];
}

static struct loom_comm *host_of(const struct loom_comm *c) { return state_of(c)->host; }

/* ---- process-wide state ------------------------------------------------------------------- */

static enum loom_status init_globals(void) {
    if (g.ready) return LOOM_OK;
    int least = 0, greatest = 0;
    CUDA_TRY("cudaDeviceGetStreamPriorityRange", cudaDeviceGetStreamPriorityRange(&least, &greatest));
    /* the highest priority: communication kernels start as soon as their inputs are ready */
    CUDA_TRY("creating the communication stream",
             cudaStreamCreateWithPriority(&g.comm, cudaStreamNonBlocking, greatest));
    CUDA_TRY("cudaEventCreate", cudaEventCreateWithFlags(&g.in, cudaEventDisableTiming));
    CUDA_TRY("cudaEventCreate", cudaEventCreateWithFlags(&g.out, cudaEventDisableTiming));
    g.ready = 1;
    return LOOM_OK;
}

static enum loom_status get_event(cudaEvent_t *ev) {
    if (g.npool > 0) {
        *ev = g.pool[--g.npool];
        return LOOM_OK;
    }
    CUDA_TRY("cudaEventCreate", cudaEventCreateWithFlags(ev, cudaEventDisableTiming));
    return LOOM_OK;
}

static void put_event(cudaEvent_t ev) {
    if (g.npool == g.cappool) {
        int cap = g.cappool ? 2 * g.cappool : 16;
        cudaEvent_t *p = realloc(g.pool, (size_t)cap * sizeof *p);
        if (!p) {
            cudaEventDestroy(ev);
            return;
        }
        g.pool = p;
        g.cappool = cap;
    }
    g.pool[g.npool++] = ev;
}

/* The communication stream waits for the work queued on the compute stream so far. */
static enum loom_status enter(void) {
    CUDA_TRY("cudaEventRecord", cudaEventRecord(g.in, g.user));
    CUDA_TRY("cudaStreamWaitEvent", cudaStreamWaitEvent(g.comm, g.in, 0));
    return LOOM_OK;
}

/* The compute stream waits for the work queued on the communication stream so far. */
static enum loom_status leave(void) {
    CUDA_TRY("cudaEventRecord", cudaEventRecord(g.out, g.comm));
    CUDA_TRY("cudaStreamWaitEvent", cudaStreamWaitEvent(g.user, g.out, 0));
    return LOOM_OK;
}

static enum loom_status where(const char *what, const void *a, const void *b, int64_t count,
                              int *dev) {
    return loom_comm_where("nccl", what, a, b, count, dev);
}

static int nccl_type(enum loom_dtype dt, ncclDataType_t *t) {
    switch (dt) {
    case LOOM_DTYPE_F32: *t = ncclFloat32; return 1;
    case LOOM_DTYPE_F64: *t = ncclFloat64; return 1;
    case LOOM_DTYPE_I32: *t = ncclInt32; return 1;
    case LOOM_DTYPE_I64: *t = ncclInt64; return 1;
    case LOOM_DTYPE_U8: *t = ncclUint8; return 1;
    case LOOM_DTYPE_BF16: *t = ncclBfloat16; return 1;
    case LOOM_DTYPE_F16: *t = ncclFloat16; return 1;
    default: return 0;
    }
}

static ncclRedOp_t nccl_op(enum loom_redop op) {
    switch (op) {
    case LOOM_REDOP_SUM: return ncclSum;
    case LOOM_REDOP_MAX: return ncclMax;
    case LOOM_REDOP_MIN: return ncclMin;
    }
    return ncclSum;
}

static enum loom_status reduce_type(const char *what, enum loom_dtype dt, ncclDataType_t *t) {
    if (!nccl_type(dt, t))
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "%s: NCCL cannot reduce %s in device memory; valid: F32, F64, I32, I64, "
                         "U8",
                         what, loom_dtype_name(dt));
    return LOOM_OK;
}

static size_t nbytes(int64_t count, enum loom_dtype dt) {
    return (size_t)count * loom_dtype_size(dt);
}

/* ---- point-to-point: pending sends and receives ---------------------------------------------- */

static enum loom_status new_req(struct nccl_req **out) {
    struct nccl_req *r = calloc(1, sizeof *r);
    if (!r) return loom_fail(LOOM_ERR_OOM, "nccl comm: out of memory");
    r->base.ops = &g_nccl_ops;
    enum loom_status s = get_event(&r->done);
    if (s != LOOM_OK) {
        free(r);
        return s;
    }
    *out = r;
    return LOOM_OK;
}

static void free_req(struct nccl_req *r) {
    put_event(r->done);
    if (r->pending) put_event(r->ready);
    free(r);
}

/* Launch every pending send and receive as one group. */
static enum loom_status flush_pending(void) {
    if (!g.npending) return LOOM_OK;
    for (int i = 0; i < g.npending; i++)
        CUDA_TRY("cudaStreamWaitEvent", cudaStreamWaitEvent(g.comm, g.pending[i]->ready, 0));
    ncclResult_t first = ncclSuccess;
    ncclComm_t bad = NULL;
    NCCL_TRY("ncclGroupStart", NULL, ncclGroupStart());
    for (int i = 0; i < g.npending; i++) {
        struct nccl_req *p = g.pending[i];
        ncclResult_t r = p->is_recv ? ncclRecv(p->buf, p->bytes, ncclInt8, p->peer, p->nc, g.comm)
                                    : ncclSend(p->buf, p->bytes, ncclInt8, p->peer, p->nc, g.comm);
        if (r != ncclSuccess && first == ncclSuccess) first = r, bad = p->nc;
    }
    ncclResult_t end = ncclGroupEnd();
    if (first == ncclSuccess && end != ncclSuccess) first = end;
    if (first != ncclSuccess) return nccl_err("send/recv", first, bad);
    for (int i = 0; i < g.npending; i++) {
        struct nccl_req *p = g.pending[i];
        CUDA_TRY("cudaEventRecord", cudaEventRecord(p->done, g.comm));
        put_event(p->ready);
        p->pending = 0;
    }
    g.npending = 0;
    return LOOM_OK;
}

/* Post a send or receive: it launches with the next flush. */
static enum loom_status post(struct loom_comm *c, void *buf, int64_t count, enum loom_dtype dt,
                             int peer, int tag, int is_recv, struct loom_comm_req **req) {
    if (g.npending == g.cappending) {
        int cap = g.cappending ? 2 * g.cappending : 16;
        struct nccl_req **p = realloc(g.pending, (size_t)cap * sizeof *p);
        if (!p) return loom_fail(LOOM_ERR_OOM, "send/recv: out of memory");
        g.pending = p;
        g.cappending = cap;
    }
    struct nccl_req *r;
    LOOM_CHECK(new_req(&r));
    enum loom_status s = get_event(&r->ready);
    if (s != LOOM_OK) {
        free_req(r);
        return s;
    }
    r->pending = 1;
    cudaError_t e = cudaEventRecord(r->ready, g.user);
    if (e != cudaSuccess) {
        free_req(r);
        return cuda_err("cudaEventRecord", e);
    }
    r->is_recv = is_recv;
    r->nc = nccl_of(c, tag);
    r->buf = buf;
    r->bytes = nbytes(count, dt);
    r->peer = peer;
    g.pending[g.npending++] = r;
    *req = &r->base;
    return LOOM_OK;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

static enum loom_status wrap(struct loom_comm **out, struct loom_comm *host,
                             ncclComm_t nc[NCCL_CLASSES]) {
    for (int k = 0; k < NCCL_CLASSES; k++) {
        int r = -1, n = -1;
        NCCL_TRY("ncclCommUserRank", nc[k], ncclCommUserRank(nc[k], &r));
        NCCL_TRY("ncclCommCount", nc[k], ncclCommCount(nc[k], &n));
        if (r != host->rank || n != host->size)
            return loom_fail(LOOM_ERR_COMM,
                             "nccl comm: NCCL placed this rank at %d of %d, MPI at %d of %d", r, n,
                             host->rank, host->size);
    }
    struct nccl_state *st = malloc(sizeof *st);
    if (st) *out = loom_comm_alloc(&g_nccl_ops, host->rank, host->size, st);
    if (!st || !*out) {
        free(st);
        return loom_fail(LOOM_ERR_OOM, "nccl comm: out of memory");
    }
    memcpy(st->nc, nc, sizeof st->nc);
    st->host = host;
    return LOOM_OK;
}

static void destroy_nccl(ncclComm_t nc[NCCL_CLASSES]) {
    for (int k = 0; k < NCCL_CLASSES; k++)
        if (nc[k]) ncclCommDestroy(nc[k]);
}

enum loom_status loom_comm_nccl_world(struct loom_comm **out, int *argc, char ***argv) {
    *out = NULL;
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        cudaGetLastError();
        return loom_fail(LOOM_ERR_UNSUPPORTED, "--comm nccl: no CUDA device is visible (%s)",
                         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    int dev = loom_comm_local_rank() % ndev;
    CUDA_TRY("cudaSetDevice", cudaSetDevice(dev));
    LOOM_CHECK(init_globals());
    struct loom_comm *host = NULL;
    LOOM_CHECK(loom_comm_mpi_world(&host, argc, argv));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    enum loom_status s = LOOM_OK;
    ncclComm_t nc[NCCL_CLASSES] = {NULL, NULL};
    if (host->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) s = nccl_err("ncclGetUniqueId", r, NULL);
    }
    /* every rank takes part in the broadcast, so that a failure on rank 0 cannot hang the rest;
     * a zeroed id then fails everywhere in ncclCommInitRank */
    enum loom_status sb = loom_comm_broadcast(host, &id, (int64_t)sizeof id, LOOM_DTYPE_U8, 0);
    if (s == LOOM_OK) s = sb;
    if (s == LOOM_OK) {
        ncclResult_t r = ncclCommInitRank(&nc[0], host->size, id, host->rank);
        if (r != ncclSuccess) {
            nc[0] = NULL;
            s = nccl_err("ncclCommInitRank", r, NULL);
        }
    }
    if (s == LOOM_OK) {
        ncclResult_t r = ncclCommSplit(nc[0], 0, host->rank, &nc[1], NULL);
        if (r != ncclSuccess) {
            nc[1] = NULL;
            s = nccl_err("ncclCommSplit", r, nc[0]);
        }
    }
    if (s == LOOM_OK) s = wrap(out, host, nc);
    if (s != LOOM_OK) {
        destroy_nccl(nc);
        loom_comm_free(host);
        return s;
    }
    return LOOM_OK;
}

static enum loom_status nccl_split(struct loom_comm **out, struct loom_comm *parent, int color,
                                   int key) {
    struct nccl_state *ps = state_of(parent);
    *out = NULL;
    LOOM_CHECK(flush_pending());
    struct loom_comm *host = NULL;
    LOOM_CHECK(loom_comm_split(&host, ps->host, color, key));
    ncclComm_t nc[NCCL_CLASSES] = {NULL, NULL};
    enum loom_status s = LOOM_OK;
    for (int k = 0; k < NCCL_CLASSES; k++) {
        ncclResult_t r =
            ncclCommSplit(ps->nc[k], color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc[k], NULL);
        if (r != ncclSuccess && s == LOOM_OK) {
            nc[k] = NULL;
            s = nccl_err("ncclCommSplit", r, ps->nc[k]);
        }
    }
    if (s == LOOM_OK && color >= 0 && (!host || !nc[0] || !nc[1]))
        s = loom_fail(LOOM_ERR_COMM, "nccl comm: split of color %d gave no group", color);
    if (s == LOOM_OK && color >= 0) s = wrap(out, host, nc);
    if (s != LOOM_OK || color < 0) {
        destroy_nccl(nc);
        loom_comm_free(host);
    }
    return s;
}

static void nccl_free(struct loom_comm *c) {
    struct nccl_state *st = state_of(c);
    if (!st) return;
    flush_pending();
    cudaStreamSynchronize(g.comm);
    destroy_nccl(st->nc);
    loom_comm_free(st->host);
    free(st);
    c->impl = NULL;
}

/* ---- collectives ----------------------------------------------------------------------------- */

static enum loom_status nccl_allreduce(struct loom_comm *c, void *buf, int64_t count,
                                       enum loom_dtype dt, enum loom_redop op) {
    int dev;
    LOOM_CHECK(where("allreduce", buf, NULL, count, &dev));
    LOOM_CHECK(flush_pending());
    if (!dev) return loom_comm_allreduce(host_of(c), buf, count, dt, op);
    ncclDataType_t t = ncclFloat32;
    LOOM_CHECK(reduce_type("allreduce", dt, &t));
    LOOM_CHECK(enter());
    NCCL_TRY("allreduce", nccl_of(c, 0),
             ncclAllReduce(buf, buf, (size_t)count, t, nccl_op(op), nccl_of(c, 0), g.comm));
    return leave();
}

static enum loom_status nccl_reduce_scatter(struct loom_comm *c, void *recv, const void *send,
                                            int64_t count, enum loom_dtype dt,
                                            enum loom_redop op) {
    int dev;
    LOOM_CHECK(where("reduce_scatter", recv, send, count, &dev));
    LOOM_CHECK(flush_pending());
    if (!dev) return loom_comm_reduce_scatter(host_of(c), recv, send, count, dt, op);
    ncclDataType_t t = ncclFloat32;
    LOOM_CHECK(reduce_type("reduce_scatter", dt, &t));
    LOOM_CHECK(enter());
    NCCL_TRY("reduce_scatter", nccl_of(c, 0),
             ncclReduceScatter(send, recv, (size_t)count, t, nccl_op(op), nccl_of(c, 0), g.comm));
    return leave();
}

static enum loom_status nccl_allgather(struct loom_comm *c, void *recv, const void *send,
                                       int64_t count, enum loom_dtype dt) {
    int dev;
    LOOM_CHECK(where("allgather", recv, send, count, &dev));
    LOOM_CHECK(flush_pending());
    if (!dev) return loom_comm_allgather(host_of(c), recv, send, count, dt);
    LOOM_CHECK(enter());
    /* the in-place form (send at its place in recv) is NCCL's own */
    NCCL_TRY("allgather", nccl_of(c, 0),
             ncclAllGather(send, recv, nbytes(count, dt), ncclInt8, nccl_of(c, 0), g.comm));
    return leave();
}

static enum loom_status stage_send(const void **send, const void *recv, size_t extent) {
    if (*send != recv || !extent) return LOOM_OK;
    if (extent > g.tmp_bytes) {
        CUDA_TRY("cudaStreamSynchronize", cudaStreamSynchronize(g.comm));
        if (g.tmp) cudaFree(g.tmp);
        g.tmp = NULL;
        g.tmp_bytes = 0;
        CUDA_TRY("allocating the all-to-all staging buffer", cudaMalloc(&g.tmp, extent));
        g.tmp_bytes = extent;
    }
    CUDA_TRY("cudaMemcpyAsync",
             cudaMemcpyAsync(g.tmp, *send, extent, cudaMemcpyDeviceToDevice, g.comm));
    *send = g.tmp;
    return LOOM_OK;
}

/* Blocks between ranks as one group of sends and receives (block r of send goes to rank r). */
static enum loom_status exchange(struct loom_comm *c, void *recv, const size_t *rcount,
                                 const size_t *roff, const void *send, const size_t *scount,
                                 const size_t *soff) {
    ncclComm_t nc = nccl_of(c, 0);
    ncclResult_t first = ncclSuccess;
    NCCL_TRY("ncclGroupStart", nc, ncclGroupStart());
    for (int r = 0; r < c->size; r++) {
        ncclResult_t e1 = ncclSend((const char *)send + soff[r], scount[r], ncclInt8, r, nc, g.comm);
        ncclResult_t e2 = ncclRecv((char *)recv + roff[r], rcount[r], ncclInt8, r, nc, g.comm);
        if (first == ncclSuccess) first = e1 != ncclSuccess ? e1 : e2;
    }
    ncclResult_t end = ncclGroupEnd();
    if (first == ncclSuccess) first = end;
    if (first != ncclSuccess) return nccl_err("alltoall", first, nc);
    return leave();
}

static enum loom_status nccl_alltoall(struct loom_comm *c, void *recv, const void *send,
                                      int64_t count, enum loom_dtype dt) {
    int dev;
    LOOM_CHECK(where("alltoall", recv, send, count, &dev));
    LOOM_CHECK(flush_pending());
    if (!dev) return loom_comm_alltoall(host_of(c), recv, send, count, dt);
    size_t blk = nbytes(count, dt), n = (size_t)c->size;
    size_t *v = malloc(2 * n * sizeof *v);
    if (!v) return loom_fail(LOOM_ERR_OOM, "alltoall: out of memory");
    for (size_t r = 0; r < n; r++) {
        v[r] = blk;
        v[n + r] = r * blk;
    }
    enum loom_status s = enter();
    if (s == LOOM_OK) s = stage_send(&send, recv, n * blk);
    if (s == LOOM_OK) s = exchange(c, recv, v, v + n, send, v, v + n);
    free(v);
    return s;
}

static enum loom_status nccl_alltoallv(struct loom_comm *c, void *recv, const int64_t *recv_counts,
                                       const int64_t *recv_displs, const void *send,
                                       const int64_t *send_counts, const int64_t *send_displs,
                                       enum loom_dtype dt) {
    int64_t total = 0;
    for (int r = 0; r < c->size; r++) total += send_counts[r] + recv_counts[r];
    int dev;
    LOOM_CHECK(where("alltoallv", recv, send, total, &dev));
    LOOM_CHECK(flush_pending());
    if (!dev)
        return loom_comm_alltoallv(host_of(c), recv, recv_counts, recv_displs, send, send_counts,
                                   send_displs, dt);
    size_t n = (size_t)c->size, e = loom_dtype_size(dt), extent = 0;
    size_t *v = malloc(4 * n * sizeof *v);
    if (!v) return loom_fail(LOOM_ERR_OOM, "alltoallv: out of memory");
    for (size_t r = 0; r < n; r++) {
        v[r] = (size_t)recv_counts[r] * e;
        v[n + r] = (size_t)recv_displs[r] * e;
        v[2 * n + r] = (size_t)send_counts[r] * e;
        v[3 * n + r] = (size_t)send_displs[r] * e;
        if (v[2 * n + r] + v[3 * n + r] > extent) extent = v[2 * n + r] + v[3 * n + r];
    }
    enum loom_status s = enter();
    if (s == LOOM_OK) s = stage_send(&send, recv, extent);
    if (s == LOOM_OK) s = exchange(c, recv, v, v + n, send, v + 2 * n, v + 3 * n);
    free(v);
    return s;
}

static enum loom_status nccl_broadcast(struct loom_comm *c, void *buf, int64_t count,
                                       enum loom_dtype dt, int root) {
    int dev;
    LOOM_CHECK(where("broadcast", buf, NULL, count, &dev));
    LOOM_CHECK(flush_pending());
    if (!dev) return loom_comm_broadcast(host_of(c), buf, count, dt, root);
    LOOM_CHECK(enter());
    NCCL_TRY("broadcast", nccl_of(c, 0),
             ncclBroadcast(buf, buf, nbytes(count, dt), ncclInt8, root, nccl_of(c, 0), g.comm));
    return leave();
}

static enum loom_status nccl_barrier(struct loom_comm *c) {
    LOOM_CHECK(flush_pending());
    return loom_comm_barrier(host_of(c));
}

/* ---- point-to-point and non-blocking --------------------------------------------------------- */

static enum loom_status nccl_isend(struct loom_comm *c, const void *buf, int64_t count,
                                   enum loom_dtype dt, int peer, int tag,
                                   struct loom_comm_req **req) {
    int dev;
    LOOM_CHECK(where("isend", buf, NULL, count, &dev));
    if (!dev) {
        LOOM_CHECK(flush_pending());
        return loom_comm_isend(host_of(c), buf, count, dt, peer, tag, req);
    }
    return post(c, (void *)buf, count, dt, peer, tag, 0, req);
}

static enum loom_status nccl_irecv(struct loom_comm *c, void *buf, int64_t count,
                                   enum loom_dtype dt, int peer, int tag,
                                   struct loom_comm_req **req) {
    int dev;
    LOOM_CHECK(where("irecv", buf, NULL, count, &dev));
    if (!dev) {
        LOOM_CHECK(flush_pending());
        return loom_comm_irecv(host_of(c), buf, count, dt, peer, tag, req);
    }
    return post(c, buf, count, dt, peer, tag, 1, req);
}

enum inplace_coll { COLL_ALLREDUCE, COLL_REDUCE_SCATTER, COLL_ALLGATHER };

/* A non-blocking collective over a device buffer, in place (NCCL's in-place reduce-scatter and
 * all-gather keep this rank's block at its place; the all-gather moves bytes, as nccl_allgather),
 * as a request whose event follows it on the communication stream. */
static enum loom_status inplace_req(struct loom_comm *c, const char *what, enum inplace_coll kind,
                                    void *buf, int64_t count, enum loom_dtype dt,
                                    enum loom_redop op, struct loom_comm_req **req) {
    ncclDataType_t t = ncclInt8;
    if (kind != COLL_ALLGATHER) LOOM_CHECK(reduce_type(what, dt, &t));
    struct nccl_req *r;
    LOOM_CHECK(new_req(&r));
    enum loom_status s = enter();
    if (s == LOOM_OK) {
        const size_t n = (size_t)count, b = nbytes(count, dt);
        void *own = (char *)buf + b * (size_t)c->rank;
        ncclComm_t nc = nccl_of(c, 0);
        ncclResult_t nr;
        if (kind == COLL_ALLGATHER)
            nr = ncclAllGather(own, buf, b, t, nc, g.comm);
        else if (kind == COLL_REDUCE_SCATTER)
            nr = ncclReduceScatter(buf, own, n, t, nccl_op(op), nc, g.comm);
        else
            nr = ncclAllReduce(buf, buf, n, t, nccl_op(op), nc, g.comm);
        if (nr != ncclSuccess) s = nccl_err(what, nr, nc);
    }
    if (s == LOOM_OK) {
        cudaError_t e = cudaEventRecord(r->done, g.comm);
        if (e != cudaSuccess) s = cuda_err("cudaEventRecord", e);
    }
    if (s != LOOM_OK) {
        free_req(r);
        return s;
    }
    *req = &r->base;
    return LOOM_OK;
}

static enum loom_status nccl_iallreduce(struct loom_comm *c, void *buf, int64_t count,
                                        enum loom_dtype dt, enum loom_redop op,
                                        struct loom_comm_req **req) {
    int dev;
    LOOM_CHECK(where("iallreduce", buf, NULL, count, &dev));
    LOOM_CHECK(flush_pending());
    if (!dev) return loom_comm_iallreduce(host_of(c), buf, count, dt, op, req);
    return inplace_req(c, "iallreduce", COLL_ALLREDUCE, buf, count, dt, op, req);
}

static enum loom_status nccl_ireduce_scatter(struct loom_comm *c, void *buf, int64_t count,
                                             enum loom_dtype dt, enum loom_redop op,
                                             struct loom_comm_req **req) {
    int dev;
    LOOM_CHECK(where("ireduce_scatter", buf, NULL, count, &dev));
    LOOM_CHECK(flush_pending());
    if (!dev) return loom_comm_ireduce_scatter(host_of(c), buf, count, dt, op, req);
    return inplace_req(c, "ireduce_scatter", COLL_REDUCE_SCATTER, buf, count, dt, op, req);
}

static enum loom_status nccl_iallgather(struct loom_comm *c, void *buf, int64_t count,
                                        enum loom_dtype dt, struct loom_comm_req **req) {
    int dev;
    LOOM_CHECK(where("iallgather", buf, NULL, count, &dev));
    LOOM_CHECK(flush_pending());
    if (!dev) return loom_comm_iallgather(host_of(c), buf, count, dt, req);
    return inplace_req(c, "iallgather", COLL_ALLGATHER, buf, count, dt, LOOM_REDOP_SUM, req);
}

static enum loom_status nccl_wait(struct loom_comm_req *req) {
    struct nccl_req *r = (struct nccl_req *)req;
    enum loom_status s = r->pending ? flush_pending() : LOOM_OK;
    if (s == LOOM_OK) {
        cudaError_t e = cudaStreamWaitEvent(g.user, r->done, 0);
        if (e != cudaSuccess) s = cuda_err("cudaStreamWaitEvent", e);
    }
    free_req(r);
    return s;
}

static enum loom_status nccl_test(struct loom_comm_req *req, int *done) {
    struct nccl_req *r = (struct nccl_req *)req;
    *done = 0;
    if (r->pending) LOOM_CHECK(flush_pending());
    cudaError_t e = cudaEventQuery(r->done);
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return LOOM_OK;
    }
    if (e != cudaSuccess) return cuda_err("cudaEventQuery", e);
    *done = 1;
    free_req(r);
    return LOOM_OK;
}

static enum loom_status nccl_send(struct loom_comm *c, const void *buf, int64_t count,
                                  enum loom_dtype dt, int peer, int tag) {
    struct loom_comm_req *r;
    LOOM_CHECK(nccl_isend(c, buf, count, dt, peer, tag, &r));
    return r->ops->wait(r);
}

static enum loom_status nccl_recv(struct loom_comm *c, void *buf, int64_t count,
                                  enum loom_dtype dt, int peer, int tag) {
    struct loom_comm_req *r;
    LOOM_CHECK(nccl_irecv(c, buf, count, dt, peer, tag, &r));
    return r->ops->wait(r);
}

static const struct loom_comm_ops g_nccl_ops = {
    .name = "nccl",
    .stream_ordered = 1,
    .device_memory = 1,
    .split = nccl_split,
    .free = nccl_free,
    .allreduce = nccl_allreduce,
    .reduce_scatter = nccl_reduce_scatter,
    .allgather = nccl_allgather,
    .alltoall = nccl_alltoall,
    .alltoallv = nccl_alltoallv,
    .broadcast = nccl_broadcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .iallreduce = nccl_iallreduce,
    .ireduce_scatter = nccl_ireduce_scatter,
    .iallgather = nccl_iallgather,
    .isend = nccl_isend,
    .irecv = nccl_irecv,
    .wait = nccl_wait,
    .test = nccl_test,
};
