/* "mpi" backend: host buffers over MPI (built when LOOM_MPI is on).
 *
 * The world is a duplicate of MPI_COMM_WORLD, so loom's traffic never mixes with a host
 * program's; groups are MPI_Comm_split of it. Every communicator returns MPI errors as codes
 * (MPI_ERRORS_RETURN) that become LOOM_ERR_COMM with MPI's own message.
 *
 * MPI counts are int. All-reduce, broadcast and point-to-point calls longer than the chunk limit
 * (1 << 30 elements) go in several MPI calls over consecutive pieces, which keeps an all-reduce
 * bit-identical across ranks and messages in order (a receive must then use the sender's
 * count). Per-rank blocks of the other collectives must fit in an int.
 *
 * BF16/F16 travel as raw 16-bit words and FP8 as raw bytes; comm.c refuses to reduce them.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "loom/log.h"

#define MAX_CHUNK_DEFAULT ((int64_t)1 << 30)

static int g_we_initialized; /* MPI_Init_thread was called by loom_comm_mpi_world */
static int64_t g_max_chunk = MAX_CHUNK_DEFAULT;

struct mpi_state {
    MPI_Comm comm;
};

struct mpi_req {
    struct loom_comm_req base;
    /* ireduce_scatter: the result lands in tmp (malloc), copied to dst at completion */
    void *tmp, *dst;
    size_t bytes;
    int n;
    MPI_Request reqs[];
};

static const struct loom_comm_ops g_mpi_ops;

static MPI_Comm comm_of(const struct loom_comm *c) {
    return ((const struct mpi_state *)c->impl)->comm;
}

static enum loom_status mpi_err(const char *what, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = 0;
    return loom_fail(LOOM_ERR_COMM, "%s: MPI error %d: %s", what, rc, msg);
}

#define MPI_TRY(what, call)                                                                   \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_ != MPI_SUCCESS) return mpi_err(what, rc_);                                    \
    } while (0)

static MPI_Datatype mpi_dtype(enum loom_dtype dt) {
    switch (dt) {
    case LOOM_DTYPE_F32: return MPI_FLOAT;
    case LOOM_DTYPE_F64: return MPI_DOUBLE;
    case LOOM_DTYPE_I32: return MPI_INT32_T;
    case LOOM_DTYPE_I64: return MPI_INT64_T;
    case LOOM_DTYPE_U16:
    case LOOM_DTYPE_BF16:
    case LOOM_DTYPE_F16: return MPI_UINT16_T;
    case LOOM_DTYPE_U8:
    case LOOM_DTYPE_F8_E4M3:
    case LOOM_DTYPE_F8_E5M2: return MPI_UINT8_T;
    case LOOM_DTYPE_COUNT: break;
    }
    return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(enum loom_redop op) {
    switch (op) {
    case LOOM_REDOP_SUM: return MPI_SUM;
    case LOOM_REDOP_MAX: return MPI_MAX;
    case LOOM_REDOP_MIN: return MPI_MIN;
    }
    return MPI_OP_NULL;
}

static enum loom_status fits_int(const char *what, int64_t count) {
    if (count > INT_MAX)
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "%s: %lld elements per rank exceed the MPI limit of %d", what,
                         (long long)count, INT_MAX);
    return LOOM_OK;
}

static int64_t n_chunks(int64_t count) {
    return count == 0 ? 1 : (count + g_max_chunk - 1) / g_max_chunk;
}

static int chunk_len(int64_t count, int64_t i) {
    int64_t left = count - i * g_max_chunk;
    return (int)(left < g_max_chunk ? left : g_max_chunk);
}

static void *advance(const void *p, int64_t i, enum loom_dtype dt) {
    return (char *)p + (size_t)(i * g_max_chunk) * loom_dtype_size(dt);
}

void loom_comm_mpi_set_max_chunk(int64_t n) {
    g_max_chunk = (n <= 0 || n > INT_MAX) ? MAX_CHUNK_DEFAULT : n;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

int loom_comm_mpi_active(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

void loom_comm_mpi_abort(int code) {
    if (loom_comm_mpi_active()) MPI_Abort(MPI_COMM_WORLD, code);
}

static void abort_hook(int code) { loom_comm_mpi_abort(code); }

static enum loom_status wrap(struct loom_comm **out, MPI_Comm comm) {
    int rank, size;
    MPI_TRY("MPI_Comm_set_errhandler", MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    MPI_TRY("MPI_Comm_rank", MPI_Comm_rank(comm, &rank));
    MPI_TRY("MPI_Comm_size", MPI_Comm_size(comm, &size));
    struct mpi_state *st = malloc(sizeof *st);
    if (st) *out = loom_comm_alloc(&g_mpi_ops, rank, size, st);
    if (!st || !*out) {
        free(st);
        MPI_Comm_free(&comm);
        return loom_fail(LOOM_ERR_OOM, "mpi comm: out of memory");
    }
    st->comm = comm;
    return LOOM_OK;
}

/* MPI running (started here, FUNNELED, unless the host program started it) */
static enum loom_status start_mpi(int *argc, char ***argv) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin)
        return loom_fail(LOOM_ERR_COMM, "mpi comm: MPI was already finalised; it cannot restart");
    if (!init) {
        int provided = 0;
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return mpi_err("MPI_Init_thread", rc);
        g_we_initialized = 1;
        if (provided < MPI_THREAD_FUNNELED)
            loom_log_warn("MPI provides thread level %d, below MPI_THREAD_FUNNELED", provided);
    }
    loom_set_abort_hook(abort_hook);
    return LOOM_OK;
}

enum loom_status loom_comm_mpi_world(struct loom_comm **out, int *argc, char ***argv) {
    LOOM_CHECK(start_mpi(argc, argv));
    MPI_Comm dup;
    MPI_TRY("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    return wrap(out, dup);
}

/* ---- the start-up agreement ------------------------------------------------------------------ */

static enum loom_status agree_on(MPI_Comm comm, int failed, const char *text, int *job_failed,
                                 char *verdict, size_t cap) {
    int rank, size;
    MPI_TRY("MPI_Comm_rank", MPI_Comm_rank(comm, &rank));
    MPI_TRY("MPI_Comm_size", MPI_Comm_size(comm, &size));
    size_t tlen = strlen(text) + 1;
    if (tlen > INT_MAX / 2) tlen = INT_MAX / 2;
    int mine[2] = {failed != 0, (int)tlen};
    int *info = NULL, *counts = NULL, *displs = NULL;
    char *all = NULL;
    const char **texts = NULL;
    enum loom_status s = LOOM_OK;
    if (rank == 0) {
        info = malloc(2 * (size_t)size * sizeof *info);
        counts = malloc((size_t)size * sizeof *counts);
        displs = malloc((size_t)size * sizeof *displs);
        texts = malloc((size_t)size * sizeof *texts);
        if (!info || !counts || !displs || !texts) s = loom_fail(LOOM_ERR_OOM, "start-up agreement: out of memory");
    }
    /* every rank takes part in every call, whatever rank 0 met; rank 0 alone may then decide
     * that the job fails because of its own trouble */
    int rc = MPI_Gather(mine, 2, MPI_INT, s == LOOM_OK ? info : NULL, 2, MPI_INT, 0, comm);
    if (rc != MPI_SUCCESS) return mpi_err("start-up agreement: MPI_Gather", rc);
    int64_t total = 0;
    if (rank == 0 && s == LOOM_OK) {
        for (int r = 0; r < size; r++) {
            counts[r] = info[2 * r + 1];
            displs[r] = (int)total;
            total += counts[r];
        }
        if (total > INT_MAX) s = loom_fail(LOOM_ERR_UNSUPPORTED, "start-up agreement: %lld bytes of records exceed MPI's limit", (long long)total);
        else if (!(all = malloc((size_t)total))) s = loom_fail(LOOM_ERR_OOM, "start-up agreement: out of memory");
    }
    const int ok0 = rank == 0 && s == LOOM_OK;
    rc = MPI_Gatherv(text, (int)tlen, MPI_CHAR, ok0 ? all : NULL, ok0 ? counts : NULL,
                     ok0 ? displs : NULL, MPI_CHAR, 0, comm);
    if (rc != MPI_SUCCESS && s == LOOM_OK) s = mpi_err("start-up agreement: MPI_Gatherv", rc);
    int outcome = 0;
    verdict[0] = 0;
    if (rank == 0) {
        if (s == LOOM_OK) {
            int *fails = counts; /* reused: the counts are no longer needed */
            for (int r = 0; r < size; r++) {
                all[displs[r] + counts[r] - 1] = 0;
                texts[r] = all + displs[r];
            }
            for (int r = 0; r < size; r++) fails[r] = info[2 * r];
            outcome = loom_comm_agree_verdict(size, fails, texts, verdict, cap);
        } else {
            outcome = 1;
            snprintf(verdict, cap, "%s", loom_last_error());
        }
    }
    free(info);
    free(counts);
    free(displs);
    free(texts);
    free(all);
    rc = MPI_Bcast(&outcome, 1, MPI_INT, 0, comm);
    if (rc != MPI_SUCCESS) return mpi_err("start-up agreement: MPI_Bcast", rc);
    *job_failed = outcome;
    return LOOM_OK;
}

enum loom_status loom_comm_mpi_agree(int failed, const char *text, int *job_failed, char *verdict,
                                     size_t cap, int *argc, char ***argv) {
    *job_failed = 0;
    if (cap) verdict[0] = 0;
    LOOM_CHECK(start_mpi(argc, argv));
    MPI_Comm comm;
    MPI_TRY("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    enum loom_status s = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN) == MPI_SUCCESS
                             ? agree_on(comm, failed, text ? text : "", job_failed, verdict, cap)
                             : loom_fail(LOOM_ERR_COMM, "start-up agreement: MPI_Comm_set_errhandler failed");
    MPI_Comm_free(&comm);
    return s;
}

void loom_comm_mpi_finalize(void) {
    if (!g_we_initialized || !loom_comm_mpi_active()) return;
    loom_set_abort_hook(NULL);
    MPI_Finalize();
}

static enum loom_status mpi_split(struct loom_comm **out, struct loom_comm *parent, int color,
                                  int key) {
    MPI_Comm sub;
    MPI_TRY("MPI_Comm_split",
            MPI_Comm_split(comm_of(parent), color < 0 ? MPI_UNDEFINED : color, key, &sub));
    *out = NULL;
    if (sub == MPI_COMM_NULL) return LOOM_OK;
    return wrap(out, sub);
}

static void mpi_free(struct loom_comm *c) {
    struct mpi_state *st = c->impl;
    if (!st) return;
    if (loom_comm_mpi_active()) MPI_Comm_free(&st->comm);
    free(st);
    c->impl = NULL;
}

/* ---- collectives ----------------------------------------------------------------------------- */

static enum loom_status mpi_allreduce(struct loom_comm *c, void *buf, int64_t count,
                                      enum loom_dtype dt, enum loom_redop op) {
    for (int64_t i = 0, n = n_chunks(count); i < n; i++)
        MPI_TRY("allreduce", MPI_Allreduce(MPI_IN_PLACE, advance(buf, i, dt), chunk_len(count, i),
                                           mpi_dtype(dt), mpi_op(op), comm_of(c)));
    return LOOM_OK;
}

static enum loom_status mpi_reduce_scatter(struct loom_comm *c, void *recv, const void *send,
                                           int64_t count, enum loom_dtype dt,
                                           enum loom_redop op) {
    LOOM_CHECK(fits_int("reduce_scatter", count));
    if (c->size == 1) { /* MPI forbids aliased buffers; one rank is a copy anyway */
        if (recv != send) memmove(recv, send, (size_t)count * loom_dtype_size(dt));
        return LOOM_OK;
    }
    if (send == recv)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "reduce_scatter: send and recv must not be the same buffer");
    MPI_TRY("reduce_scatter", MPI_Reduce_scatter_block(send, recv, (int)count, mpi_dtype(dt),
                                                       mpi_op(op), comm_of(c)));
    return LOOM_OK;
}

static enum loom_status mpi_allgather(struct loom_comm *c, void *recv, const void *send,
                                      int64_t count, enum loom_dtype dt) {
    LOOM_CHECK(fits_int("allgather", count));
    MPI_Datatype t = mpi_dtype(dt);
    /* send may already sit at its place in recv (the in-place form) */
    size_t own = (size_t)c->rank * (size_t)count * loom_dtype_size(dt);
    const void *sb = (const char *)send == (const char *)recv + own ? MPI_IN_PLACE : send;
    MPI_TRY("allgather", MPI_Allgather(sb, (int)count, t, recv, (int)count, t, comm_of(c)));
    return LOOM_OK;
}

static enum loom_status mpi_alltoall(struct loom_comm *c, void *recv, const void *send,
                                     int64_t count, enum loom_dtype dt) {
    LOOM_CHECK(fits_int("alltoall", count));
    MPI_Datatype t = mpi_dtype(dt);
    const void *sb = send == recv ? MPI_IN_PLACE : send;
    MPI_TRY("alltoall", MPI_Alltoall(sb, (int)count, t, recv, (int)count, t, comm_of(c)));
    return LOOM_OK;
}

static enum loom_status to_int(const char *what, const int64_t *v, int *out, int n) {
    for (int i = 0; i < n; i++) {
        if (v[i] > INT_MAX)
            return loom_fail(LOOM_ERR_UNSUPPORTED,
                             "%s: count or displacement %lld exceeds the MPI limit of %d", what,
                             (long long)v[i], INT_MAX);
        out[i] = (int)v[i];
    }
    return LOOM_OK;
}

static enum loom_status mpi_alltoallv(struct loom_comm *c, void *recv, const int64_t *recv_counts,
                                      const int64_t *recv_displs, const void *send,
                                      const int64_t *send_counts, const int64_t *send_displs,
                                      enum loom_dtype dt) {
    int n = c->size;
    int *v = malloc(4 * (size_t)n * sizeof *v);
    if (!v) return loom_fail(LOOM_ERR_OOM, "alltoallv: out of memory");
    enum loom_status s = to_int("alltoallv", send_counts, v, n);
    if (s == LOOM_OK) s = to_int("alltoallv", send_displs, v + n, n);
    if (s == LOOM_OK) s = to_int("alltoallv", recv_counts, v + 2 * n, n);
    if (s == LOOM_OK) s = to_int("alltoallv", recv_displs, v + 3 * n, n);
    if (s == LOOM_OK) {
        MPI_Datatype t = mpi_dtype(dt);
        int rc = MPI_Alltoallv(send, v, v + n, t, recv, v + 2 * n, v + 3 * n, t, comm_of(c));
        if (rc != MPI_SUCCESS) s = mpi_err("alltoallv", rc);
    }
    free(v);
    return s;
}

static enum loom_status mpi_broadcast(struct loom_comm *c, void *buf, int64_t count,
                                      enum loom_dtype dt, int root) {
    for (int64_t i = 0, n = n_chunks(count); i < n; i++)
        MPI_TRY("broadcast", MPI_Bcast(advance(buf, i, dt), chunk_len(count, i), mpi_dtype(dt),
                                       root, comm_of(c)));
    return LOOM_OK;
}

static enum loom_status mpi_send(struct loom_comm *c, const void *buf, int64_t count,
                                 enum loom_dtype dt, int peer, int tag) {
    for (int64_t i = 0, n = n_chunks(count); i < n; i++)
        MPI_TRY("send", MPI_Send(advance(buf, i, dt), chunk_len(count, i), mpi_dtype(dt), peer,
                                 tag, comm_of(c)));
    return LOOM_OK;
}

static enum loom_status mpi_recv(struct loom_comm *c, void *buf, int64_t count,
                                 enum loom_dtype dt, int peer, int tag) {
    for (int64_t i = 0, n = n_chunks(count); i < n; i++)
        MPI_TRY("recv", MPI_Recv(advance(buf, i, dt), chunk_len(count, i), mpi_dtype(dt), peer,
                                 tag, comm_of(c), MPI_STATUS_IGNORE));
    return LOOM_OK;
}

static enum loom_status mpi_barrier(struct loom_comm *c) {
    MPI_TRY("barrier", MPI_Barrier(comm_of(c)));
    return LOOM_OK;
}

/* ---- non-blocking ---------------------------------------------------------------------------- */

static enum loom_status new_req(int64_t count, struct mpi_req **out) {
    int64_t n = n_chunks(count);
    *out = malloc(sizeof **out + (size_t)n * sizeof(MPI_Request));
    if (!*out) return loom_fail(LOOM_ERR_OOM, "mpi comm: out of memory");
    (*out)->base.ops = &g_mpi_ops;
    (*out)->tmp = (*out)->dst = NULL;
    (*out)->bytes = 0;
    (*out)->n = (int)n;
    for (int64_t i = 0; i < n; i++) (*out)->reqs[i] = MPI_REQUEST_NULL;
    return LOOM_OK;
}

/* Error after some pieces started: wait for those (they cannot be cancelled portably). */
static enum loom_status req_fail(struct mpi_req *r, const char *what, int rc) {
    MPI_Waitall(r->n, r->reqs, MPI_STATUSES_IGNORE);
    free(r->tmp);
    free(r);
    return mpi_err(what, rc);
}

static enum loom_status mpi_iallreduce(struct loom_comm *c, void *buf, int64_t count,
                                       enum loom_dtype dt, enum loom_redop op,
                                       struct loom_comm_req **req) {
    struct mpi_req *r;
    LOOM_CHECK(new_req(count, &r));
    for (int i = 0; i < r->n; i++) {
        int rc = MPI_Iallreduce(MPI_IN_PLACE, advance(buf, i, dt), chunk_len(count, i),
                                mpi_dtype(dt), mpi_op(op), comm_of(c), &r->reqs[i]);
        if (rc != MPI_SUCCESS) return req_fail(r, "iallreduce", rc);
    }
    *req = &r->base;
    return LOOM_OK;
}

/* MPI forbids the receive block inside the send buffer: the result goes to a buffer of its own
 * and is copied into its block when the request completes (req_done) */
static enum loom_status mpi_ireduce_scatter(struct loom_comm *c, void *buf, int64_t count,
                                            enum loom_dtype dt, enum loom_redop op,
                                            struct loom_comm_req **req) {
    LOOM_CHECK(fits_int("ireduce_scatter", count));
    struct mpi_req *r;
    LOOM_CHECK(new_req(1, &r));
    r->bytes = (size_t)count * loom_dtype_size(dt);
    r->dst = (char *)buf + (size_t)c->rank * r->bytes;
    r->tmp = malloc(r->bytes ? r->bytes : 1);
    if (!r->tmp) {
        free(r);
        return loom_fail(LOOM_ERR_OOM, "mpi comm: out of memory");
    }
    int rc = MPI_Ireduce_scatter_block(buf, r->tmp, (int)count, mpi_dtype(dt), mpi_op(op),
                                       comm_of(c), &r->reqs[0]);
    if (rc != MPI_SUCCESS) return req_fail(r, "ireduce_scatter", rc);
    *req = &r->base;
    return LOOM_OK;
}

static enum loom_status mpi_iallgather(struct loom_comm *c, void *buf, int64_t count,
                                       enum loom_dtype dt, struct loom_comm_req **req) {
    LOOM_CHECK(fits_int("iallgather", count));
    struct mpi_req *r;
    LOOM_CHECK(new_req(1, &r));
    int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count, mpi_dtype(dt),
                            comm_of(c), &r->reqs[0]);
    if (rc != MPI_SUCCESS) return req_fail(r, "iallgather", rc);
    *req = &r->base;
    return LOOM_OK;
}

/* a request that has completed: an ireduce_scatter's block put in place; freed */
static void req_done(struct mpi_req *r) {
    if (r->tmp) memcpy(r->dst, r->tmp, r->bytes);
    free(r->tmp);
    free(r);
}

static enum loom_status mpi_isend(struct loom_comm *c, const void *buf, int64_t count,
                                  enum loom_dtype dt, int peer, int tag,
                                  struct loom_comm_req **req) {
    struct mpi_req *r;
    LOOM_CHECK(new_req(count, &r));
    for (int i = 0; i < r->n; i++) {
        int rc = MPI_Isend(advance(buf, i, dt), chunk_len(count, i), mpi_dtype(dt), peer, tag,
                           comm_of(c), &r->reqs[i]);
        if (rc != MPI_SUCCESS) return req_fail(r, "isend", rc);
    }
    *req = &r->base;
    return LOOM_OK;
}

static enum loom_status mpi_irecv(struct loom_comm *c, void *buf, int64_t count,
                                  enum loom_dtype dt, int peer, int tag,
                                  struct loom_comm_req **req) {
    struct mpi_req *r;
    LOOM_CHECK(new_req(count, &r));
    for (int i = 0; i < r->n; i++) {
        int rc = MPI_Irecv(advance(buf, i, dt), chunk_len(count, i), mpi_dtype(dt), peer, tag,
                           comm_of(c), &r->reqs[i]);
        if (rc != MPI_SUCCESS) return req_fail(r, "irecv", rc);
    }
    *req = &r->base;
    return LOOM_OK;
}

static enum loom_status mpi_wait(struct loom_comm_req *req) {
    struct mpi_req *r = (struct mpi_req *)req;
    int rc = MPI_Waitall(r->n, r->reqs, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
        free(r->tmp);
        free(r);
        return mpi_err("wait", rc);
    }
    req_done(r);
    return LOOM_OK;
}

static enum loom_status mpi_test(struct loom_comm_req *req, int *done) {
    struct mpi_req *r = (struct mpi_req *)req;
    int flag = 0;
    int rc = MPI_Testall(r->n, r->reqs, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_err("test", rc);
    *done = flag;
    if (flag) req_done(r);
    return LOOM_OK;
}

static const struct loom_comm_ops g_mpi_ops = {
    .name = "mpi",
    .split = mpi_split,
    .free = mpi_free,
    .allreduce = mpi_allreduce,
    .reduce_scatter = mpi_reduce_scatter,
    .allgather = mpi_allgather,
    .alltoall = mpi_alltoall,
    .alltoallv = mpi_alltoallv,
    .broadcast = mpi_broadcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .iallreduce = mpi_iallreduce,
    .ireduce_scatter = mpi_ireduce_scatter,
    .iallgather = mpi_iallgather,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .wait = mpi_wait,
    .test = mpi_test,
};
