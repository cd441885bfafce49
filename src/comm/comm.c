/* Collective interface: backend selection, argument checks, volume counters, dispatch.
 *
 * Every public entry checks its arguments here so that the backends can trust them, calls the
 * backend, and on success adds the ring-algorithm volume of the call (see comm.h) to the
 * counter of its kind.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "loom/comm.h"
#include "loom/log.h"

struct loom_comm *loom_comm_alloc(const struct loom_comm_ops *ops, int rank, int size,
                                  void *impl) {
    struct loom_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ops = ops;
    c->rank = rank;
    c->size = size;
    c->impl = impl;
    return c;
}

int loom_comm_rank(const struct loom_comm *c) { return c->rank; }
int loom_comm_size(const struct loom_comm *c) { return c->size; }
const char *loom_comm_backend_name(const struct loom_comm *c) { return c->ops->name; }
int loom_comm_stream_ordered(const struct loom_comm *c) { return c->ops->stream_ordered; }
int loom_comm_device_memory(const struct loom_comm *c) {
    return c->ops->device_memory;
}

#ifdef LOOM_HAVE_MPI
static int launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                 "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}
#endif

int loom_comm_local_rank(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                 "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r = v && *v ? strtol(v, &end, 10) : -1;
        if (v && *v && *end == 0 && r >= 0 && r < 1 << 20) return (int)r;
    }
    return 0;
}

int loom_comm_launched(void) {
#ifdef LOOM_HAVE_MPI
    return launched_by_mpi();
#else
    return 0;
#endif
}

void loom_comm_set_stream(void *stream) {
#if defined(LOOM_HAVE_CUDA) && defined(LOOM_HAVE_MPI)
    loom_comm_staged_set_stream(stream);
#endif
#ifdef LOOM_HAVE_NCCL
    loom_comm_nccl_set_stream(stream);
#endif
    (void)stream;
}

enum loom_status loom_comm_world(struct loom_comm **out, const char *backend, int *argc,
                                 char ***argv) {
    if (!out) return loom_fail(LOOM_ERR_INVALID_ARG, "loom_comm_world: out is NULL");
    *out = NULL;
    if (!backend || strcmp(backend, "auto") == 0) {
#ifdef LOOM_HAVE_MPI
        backend = launched_by_mpi() ? "mpi" : "self";
#else
        backend = "self";
#endif
    }
    if (strcmp(backend, "self") == 0) return loom_comm_self_world(out);
    if (strcmp(backend, "mpi") == 0) {
#ifdef LOOM_HAVE_MPI
        LOOM_CHECK(loom_comm_mpi_world(out, argc, argv));
        loom_log_set_rank((*out)->rank, (*out)->size);
        return LOOM_OK;
#else
        (void)argc;
        (void)argv;
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "communication backend 'mpi' is not built in (configure with "
                         "-DLOOM_MPI=ON); valid here: self");
#endif
    }
#if defined(LOOM_HAVE_CUDA) && defined(LOOM_HAVE_MPI)
    if (strcmp(backend, "mpi-staged") == 0) {
        LOOM_CHECK(loom_comm_staged_world(out, argc, argv));
        loom_log_set_rank((*out)->rank, (*out)->size);
        loom_log_info("--comm mpi with --device cuda: device buffers go through host memory "
                      "(slow: for checks on fewer GPUs than ranks, or without NCCL)");
        return LOOM_OK;
    }
#endif
    if (strcmp(backend, "nccl") == 0) {
#ifdef LOOM_HAVE_NCCL
        LOOM_CHECK(loom_comm_nccl_world(out, argc, argv));
        loom_log_set_rank((*out)->rank, (*out)->size);
        return LOOM_OK;
#else
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "communication backend 'nccl' is not built in (it needs CUDA, MPI and "
                         "nccl.h when configuring); valid here: self%s",
#ifdef LOOM_HAVE_MPI
                         ", mpi"
#else
                         ""
#endif
        );
#endif
    }
    return loom_fail(LOOM_ERR_INVALID_ARG,
                     "unknown communication backend '%s'; valid: self%s%s, auto", backend,
#ifdef LOOM_HAVE_MPI
                     ", mpi"
#else
                     ""
#endif
                     ,
#ifdef LOOM_HAVE_NCCL
                     ", nccl"
#else
                     ""
#endif
    );
}

enum loom_status loom_comm_split(struct loom_comm **out, struct loom_comm *parent, int color,
                                 int key) {
    if (!out || !parent) return loom_fail(LOOM_ERR_INVALID_ARG, "loom_comm_split: NULL argument");
    *out = NULL;
    return parent->ops->split(out, parent, color, key);
}

void loom_comm_free(struct loom_comm *c) {
    if (!c) return;
    if (c->ops->free) c->ops->free(c);
    free(c);
}

void loom_comm_finalize(void) {
#ifdef LOOM_HAVE_MPI
    loom_comm_mpi_finalize();
#endif
}

_Noreturn void loom_comm_abort_job(int code) {
    fflush(stdout);
    fflush(stderr);
#ifdef LOOM_HAVE_MPI
    loom_comm_mpi_abort(code); /* returns only when MPI is not running */
#endif
    exit(code);
}

/* This process's rank in the job: the comm layer's once the world exists, else the launcher's
 * (an error found while parsing flags comes before MPI is initialised). */
static int job_rank(void) {
    if (loom_log_world() > 1) return loom_log_rank();
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

_Noreturn void loom_comm_exit_error(int code, int collective) {
    if (!collective) {
        loom_print_error();
        loom_comm_abort_job(code);
    }
    /* Rank 0 alone carries the failure: a launcher that sees another rank exit non-zero first
     * may tear the job down before it has forwarded rank 0's message. */
    int rank0 = job_rank() == 0;
    if (rank0) loom_print_error();
    fflush(stdout);
    fflush(stderr);
    loom_comm_finalize();
    exit(rank0 ? code : 0);
}

/* ---- argument checks ---------------------------------------------------------------------- */

static enum loom_status check_common(const char *what, const struct loom_comm *c, int64_t count,
                                     enum loom_dtype dt) {
    if (!c) return loom_fail(LOOM_ERR_INVALID_ARG, "%s: comm is NULL", what);
    if ((int)dt < 0 || dt >= LOOM_DTYPE_COUNT)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: invalid dtype %d", what, (int)dt);
    if (count < 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: negative count %lld", what, (long long)count);
    return LOOM_OK;
}

static enum loom_status check_buf(const char *what, const void *buf, int64_t count,
                                  const char *name) {
    if (count > 0 && !buf)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: %s is NULL with count %lld", what, name,
                         (long long)count);
    return LOOM_OK;
}

static int is_reducible(enum loom_dtype dt) {
    switch (dt) {
    case LOOM_DTYPE_F32:
    case LOOM_DTYPE_F64:
    case LOOM_DTYPE_I32:
    case LOOM_DTYPE_I64:
    case LOOM_DTYPE_U16:
    case LOOM_DTYPE_U8: return 1;
    default: return 0;
    }
}

static const char *redop_name(enum loom_redop op) {
    switch (op) {
    case LOOM_REDOP_SUM: return "SUM";
    case LOOM_REDOP_MAX: return "MAX";
    case LOOM_REDOP_MIN: return "MIN";
    }
    return "?";
}

static enum loom_status check_redop(const char *what, const struct loom_comm *c,
                                    enum loom_dtype dt, enum loom_redop op) {
    if ((int)op < LOOM_REDOP_SUM || op > LOOM_REDOP_MIN)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: invalid reduction op %d", what, (int)op);
    if (!is_reducible(dt))
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "%s: %s reduction of %s is not supported by the '%s' backend; valid: "
                         "F32, F64, I32, I64, U16, U8 (convert to F32 first)",
                         what, redop_name(op), loom_dtype_name(dt), c->ops->name);
    return LOOM_OK;
}

static enum loom_status check_peer(const char *what, const struct loom_comm *c, int peer,
                                   const char *name) {
    if (peer < 0 || peer >= c->size)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: %s %d outside the group of %d ranks", what,
                         name, peer, c->size);
    return LOOM_OK;
}

static enum loom_status check_tag(const char *what, int tag) {
    if (tag < 0 || tag > 32767) /* the smallest MPI_TAG_UB the standard allows */
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: tag %d outside [0, 32767]", what, tag);
    return LOOM_OK;
}

static enum loom_status check_req(const char *what, struct loom_comm_req **req) {
    if (!req) return loom_fail(LOOM_ERR_INVALID_ARG, "%s: req is NULL", what);
    *req = NULL;
    return LOOM_OK;
}

/* ---- counters ------------------------------------------------------------------------------ */

static int64_t nbytes(int64_t count, enum loom_dtype dt) {
    return count * (int64_t)loom_dtype_size(dt);
}

static int64_t allreduce_volume(const struct loom_comm *c, int64_t count, enum loom_dtype dt) {
    int64_t n = c->size;
    return 2 * (n - 1) * nbytes(count, dt) / n;
}

int64_t loom_comm_bytes(const struct loom_comm *c, enum loom_coll kind) {
    if (!c || (int)kind < 0 || kind >= LOOM_COLL_COUNT) return 0;
    return c->bytes[kind];
}

void loom_comm_reset_counters(struct loom_comm *c) {
    if (c) memset(c->bytes, 0, sizeof c->bytes);
}

/* ---- blocking collectives ------------------------------------------------------------------ */

enum loom_status loom_comm_allreduce(struct loom_comm *c, void *buf, int64_t count,
                                     enum loom_dtype dt, enum loom_redop op) {
    static const char w[] = "allreduce";
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, buf, count, "buf"));
    LOOM_CHECK(check_redop(w, c, dt, op));
    LOOM_CHECK(c->ops->allreduce(c, buf, count, dt, op));
    c->bytes[LOOM_COLL_ALLREDUCE] += allreduce_volume(c, count, dt);
    return LOOM_OK;
}

enum loom_status loom_comm_reduce_scatter(struct loom_comm *c, void *recv, const void *send,
                                          int64_t count, enum loom_dtype dt, enum loom_redop op) {
    static const char w[] = "reduce_scatter";
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, recv, count, "recv"));
    LOOM_CHECK(check_buf(w, send, count, "send"));
    LOOM_CHECK(check_redop(w, c, dt, op));
    LOOM_CHECK(c->ops->reduce_scatter(c, recv, send, count, dt, op));
    c->bytes[LOOM_COLL_REDUCE_SCATTER] += (c->size - 1) * nbytes(count, dt);
    return LOOM_OK;
}

enum loom_status loom_comm_allgather(struct loom_comm *c, void *recv, const void *send,
                                     int64_t count, enum loom_dtype dt) {
    static const char w[] = "allgather";
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, recv, count, "recv"));
    LOOM_CHECK(check_buf(w, send, count, "send"));
    LOOM_CHECK(c->ops->allgather(c, recv, send, count, dt));
    c->bytes[LOOM_COLL_ALLGATHER] += (c->size - 1) * nbytes(count, dt);
    return LOOM_OK;
}

enum loom_status loom_comm_alltoall(struct loom_comm *c, void *recv, const void *send,
                                    int64_t count, enum loom_dtype dt) {
    static const char w[] = "alltoall";
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, recv, count, "recv"));
    LOOM_CHECK(check_buf(w, send, count, "send"));
    LOOM_CHECK(c->ops->alltoall(c, recv, send, count, dt));
    c->bytes[LOOM_COLL_ALLTOALL] += (c->size - 1) * nbytes(count, dt);
    return LOOM_OK;
}

static enum loom_status check_counts(const char *w, const struct loom_comm *c,
                                     const int64_t *counts, const int64_t *displs,
                                     const void *buf, const char *name, int64_t *total) {
    if (!counts || !displs)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: %s counts or displacements are NULL", w,
                         name);
    *total = 0;
    for (int r = 0; r < c->size; r++) {
        if (counts[r] < 0 || displs[r] < 0)
            return loom_fail(LOOM_ERR_INVALID_ARG,
                             "%s: %s block %d has count %lld at displacement %lld", w, name, r,
                             (long long)counts[r], (long long)displs[r]);
        *total += counts[r];
    }
    return check_buf(w, buf, *total, name);
}

enum loom_status loom_comm_alltoallv(struct loom_comm *c, void *recv, const int64_t *recv_counts,
                                     const int64_t *recv_displs, const void *send,
                                     const int64_t *send_counts, const int64_t *send_displs,
                                     enum loom_dtype dt) {
    static const char w[] = "alltoallv";
    int64_t total_send, total_recv;
    LOOM_CHECK(check_common(w, c, 0, dt));
    LOOM_CHECK(check_counts(w, c, send_counts, send_displs, send, "send", &total_send));
    LOOM_CHECK(check_counts(w, c, recv_counts, recv_displs, recv, "recv", &total_recv));
    LOOM_CHECK(c->ops->alltoallv(c, recv, recv_counts, recv_displs, send, send_counts,
                                 send_displs, dt));
    c->bytes[LOOM_COLL_ALLTOALL] += nbytes(total_send - send_counts[c->rank], dt);
    return LOOM_OK;
}

enum loom_status loom_comm_broadcast(struct loom_comm *c, void *buf, int64_t count,
                                     enum loom_dtype dt, int root) {
    static const char w[] = "broadcast";
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, buf, count, "buf"));
    LOOM_CHECK(check_peer(w, c, root, "root"));
    LOOM_CHECK(c->ops->broadcast(c, buf, count, dt, root));
    if (c->rank != (root + c->size - 1) % c->size)
        c->bytes[LOOM_COLL_BROADCAST] += nbytes(count, dt);
    return LOOM_OK;
}

enum loom_status loom_comm_send(struct loom_comm *c, const void *buf, int64_t count,
                                enum loom_dtype dt, int peer, int tag) {
    static const char w[] = "send";
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, buf, count, "buf"));
    LOOM_CHECK(check_peer(w, c, peer, "peer"));
    LOOM_CHECK(check_tag(w, tag));
    LOOM_CHECK(c->ops->send(c, buf, count, dt, peer, tag));
    if (peer != c->rank) c->bytes[LOOM_COLL_SENDRECV] += nbytes(count, dt);
    return LOOM_OK;
}

enum loom_status loom_comm_recv(struct loom_comm *c, void *buf, int64_t count, enum loom_dtype dt,
                                int peer, int tag) {
    static const char w[] = "recv";
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, buf, count, "buf"));
    LOOM_CHECK(check_peer(w, c, peer, "peer"));
    LOOM_CHECK(check_tag(w, tag));
    return c->ops->recv(c, buf, count, dt, peer, tag);
}

enum loom_status loom_comm_barrier(struct loom_comm *c) {
    if (!c) return loom_fail(LOOM_ERR_INVALID_ARG, "barrier: comm is NULL");
    return c->ops->barrier(c);
}

/* ---- non-blocking ---------------------------------------------------------------------------- */

enum loom_status loom_comm_iallreduce(struct loom_comm *c, void *buf, int64_t count,
                                      enum loom_dtype dt, enum loom_redop op,
                                      struct loom_comm_req **req) {
    static const char w[] = "iallreduce";
    LOOM_CHECK(check_req(w, req));
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, buf, count, "buf"));
    LOOM_CHECK(check_redop(w, c, dt, op));
    LOOM_CHECK(c->ops->iallreduce(c, buf, count, dt, op, req));
    c->bytes[LOOM_COLL_ALLREDUCE] += allreduce_volume(c, count, dt);
    return LOOM_OK;
}

enum loom_status loom_comm_ireduce_scatter(struct loom_comm *c, void *buf, int64_t count,
                                           enum loom_dtype dt, enum loom_redop op,
                                           struct loom_comm_req **req) {
    static const char w[] = "ireduce_scatter";
    LOOM_CHECK(check_req(w, req));
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, buf, count, "buf"));
    LOOM_CHECK(check_redop(w, c, dt, op));
    LOOM_CHECK(c->ops->ireduce_scatter(c, buf, count, dt, op, req));
    c->bytes[LOOM_COLL_REDUCE_SCATTER] += (c->size - 1) * nbytes(count, dt);
    return LOOM_OK;
}

enum loom_status loom_comm_iallgather(struct loom_comm *c, void *buf, int64_t count,
                                      enum loom_dtype dt, struct loom_comm_req **req) {
    static const char w[] = "iallgather";
    LOOM_CHECK(check_req(w, req));
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, buf, count, "buf"));
    LOOM_CHECK(c->ops->iallgather(c, buf, count, dt, req));
    c->bytes[LOOM_COLL_ALLGATHER] += (c->size - 1) * nbytes(count, dt);
    return LOOM_OK;
}

enum loom_status loom_comm_isend(struct loom_comm *c, const void *buf, int64_t count,
                                 enum loom_dtype dt, int peer, int tag,
                                 struct loom_comm_req **req) {
    static const char w[] = "isend";
    LOOM_CHECK(check_req(w, req));
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, buf, count, "buf"));
    LOOM_CHECK(check_peer(w, c, peer, "peer"));
    LOOM_CHECK(check_tag(w, tag));
    LOOM_CHECK(c->ops->isend(c, buf, count, dt, peer, tag, req));
    if (peer != c->rank) c->bytes[LOOM_COLL_SENDRECV] += nbytes(count, dt);
    return LOOM_OK;
}

enum loom_status loom_comm_irecv(struct loom_comm *c, void *buf, int64_t count,
                                 enum loom_dtype dt, int peer, int tag,
                                 struct loom_comm_req **req) {
    static const char w[] = "irecv";
    LOOM_CHECK(check_req(w, req));
    LOOM_CHECK(check_common(w, c, count, dt));
    LOOM_CHECK(check_buf(w, buf, count, "buf"));
    LOOM_CHECK(check_peer(w, c, peer, "peer"));
    LOOM_CHECK(check_tag(w, tag));
    return c->ops->irecv(c, buf, count, dt, peer, tag, req);
}

enum loom_status loom_comm_test(struct loom_comm_req *req, int *done) {
    if (!req) return loom_fail(LOOM_ERR_INVALID_ARG, "test: req is NULL");
    return req->ops->test(req, done);
}

enum loom_status loom_comm_wait(struct loom_comm_req *req) {
    if (!req) return loom_fail(LOOM_ERR_INVALID_ARG, "wait: req is NULL");
    return req->ops->wait(req);
}
