/* "self" backend: a group of one rank, no transport.
 *
 * Reductions over one rank are the identity; gathers, scatters and all-to-alls are copies.
 * Point-to-point to oneself works through a small per-group queue, as MPI's buffered self-send:
 * a send is copied into the queue (or straight into a matching posted irecv) and completes at
 * once; a recv takes the oldest queued message with its tag. A recv with nothing queued could
 * never complete, so it is an error rather than a hang.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"

struct self_msg {
    struct self_msg *next;
    int tag;
    size_t bytes;
    unsigned char data[];
};

struct self_req {
    struct loom_comm_req base;
    struct self_req *next; /* in the list of posted, unmatched irecvs */
    struct self_state *st;
    void *buf;
    size_t cap;
    int tag;
    int done;
    enum loom_status status;
};

struct self_state {
    struct self_msg *head, *tail; /* queued sends, oldest first */
    struct self_req *posted;      /* unmatched irecvs, oldest first */
};

static const struct loom_comm_ops g_self_ops;

static enum loom_status self_new(struct loom_comm **out) {
    struct self_state *st = calloc(1, sizeof *st);
    if (!st) return loom_fail(LOOM_ERR_OOM, "self comm: out of memory");
    *out = loom_comm_alloc(&g_self_ops, 0, 1, st);
    if (!*out) {
        free(st);
        return loom_fail(LOOM_ERR_OOM, "self comm: out of memory");
    }
    return LOOM_OK;
}

enum loom_status loom_comm_self_world(struct loom_comm **out) { return self_new(out); }

static enum loom_status self_split(struct loom_comm **out, struct loom_comm *parent, int color,
                                   int key) {
    (void)parent;
    (void)key;
    *out = NULL;
    if (color < 0) return LOOM_OK;
    return self_new(out);
}

static void self_free(struct loom_comm *c) {
    struct self_state *st = c->impl;
    if (!st) return;
    for (struct self_msg *m = st->head, *n; m; m = n) {
        n = m->next;
        free(m);
    }
    for (struct self_req *r = st->posted; r; r = r->next) r->st = NULL;
    free(st);
    c->impl = NULL;
}

static size_t nb(int64_t count, enum loom_dtype dt) {
    return (size_t)count * loom_dtype_size(dt);
}

static void copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memmove(dst, src, bytes);
}

static enum loom_status self_allreduce(struct loom_comm *c, void *buf, int64_t count,
                                       enum loom_dtype dt, enum loom_redop op) {
    (void)c, (void)buf, (void)count, (void)dt, (void)op;
    return LOOM_OK;
}

static enum loom_status self_reduce_scatter(struct loom_comm *c, void *recv, const void *send,
                                            int64_t count, enum loom_dtype dt,
                                            enum loom_redop op) {
    (void)c, (void)op;
    copy(recv, send, nb(count, dt));
    return LOOM_OK;
}

static enum loom_status self_allgather(struct loom_comm *c, void *recv, const void *send,
                                       int64_t count, enum loom_dtype dt) {
    (void)c;
    copy(recv, send, nb(count, dt));
    return LOOM_OK;
}

static enum loom_status self_alltoallv(struct loom_comm *c, void *recv,
                                       const int64_t *recv_counts, const int64_t *recv_displs,
                                       const void *send, const int64_t *send_counts,
                                       const int64_t *send_displs, enum loom_dtype dt) {
    (void)c;
    if (send_counts[0] != recv_counts[0])
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "alltoallv: rank 0 sends %lld elements to itself but expects %lld",
                         (long long)send_counts[0], (long long)recv_counts[0]);
    size_t es = loom_dtype_size(dt);
    copy((char *)recv + (size_t)recv_displs[0] * es,
         (const char *)send + (size_t)send_displs[0] * es, nb(send_counts[0], dt));
    return LOOM_OK;
}

static enum loom_status self_broadcast(struct loom_comm *c, void *buf, int64_t count,
                                       enum loom_dtype dt, int root) {
    (void)c, (void)buf, (void)count, (void)dt, (void)root;
    return LOOM_OK;
}

static enum loom_status self_barrier(struct loom_comm *c) {
    (void)c;
    return LOOM_OK;
}

static enum loom_status deliver(struct self_req *r, const void *data, size_t bytes) {
    if (bytes > r->cap)
        return loom_fail(LOOM_ERR_COMM,
                         "self comm: message of %zu bytes with tag %d is larger than the %zu-byte "
                         "receive buffer",
                         bytes, r->tag, r->cap);
    copy(r->buf, data, bytes);
    return LOOM_OK;
}

/* Hands a message to the oldest posted irecv with its tag, or queues a copy. */
static enum loom_status self_post_send(struct loom_comm *c, const void *buf, size_t bytes,
                                       int tag) {
    struct self_state *st = c->impl;
    for (struct self_req **pp = &st->posted; *pp; pp = &(*pp)->next) {
        struct self_req *r = *pp;
        if (r->tag != tag) continue;
        *pp = r->next;
        r->next = NULL;
        r->done = 1;
        r->status = deliver(r, buf, bytes);
        return r->status;
    }
    struct self_msg *m = malloc(sizeof *m + bytes);
    if (!m) return loom_fail(LOOM_ERR_OOM, "self comm: out of memory queueing %zu bytes", bytes);
    m->next = NULL;
    m->tag = tag;
    m->bytes = bytes;
    if (bytes) memcpy(m->data, buf, bytes);
    if (st->tail)
        st->tail->next = m;
    else
        st->head = m;
    st->tail = m;
    return LOOM_OK;
}

/* Takes the oldest queued message with `tag` into r; 0 if there is none. */
static int self_take(struct self_state *st, struct self_req *r) {
    struct self_msg *prev = NULL;
    for (struct self_msg *m = st->head; m; prev = m, m = m->next) {
        if (m->tag != r->tag) continue;
        if (prev)
            prev->next = m->next;
        else
            st->head = m->next;
        if (st->tail == m) st->tail = prev;
        r->status = deliver(r, m->data, m->bytes);
        r->done = 1;
        free(m);
        return 1;
    }
    return 0;
}

static enum loom_status self_send(struct loom_comm *c, const void *buf, int64_t count,
                                  enum loom_dtype dt, int peer, int tag) {
    (void)peer;
    return self_post_send(c, buf, nb(count, dt), tag);
}

static enum loom_status self_recv(struct loom_comm *c, void *buf, int64_t count,
                                  enum loom_dtype dt, int peer, int tag) {
    (void)peer;
    struct self_req r = {.buf = buf, .cap = nb(count, dt), .tag = tag};
    if (!self_take(c->impl, &r))
        return loom_fail(LOOM_ERR_COMM,
                         "self comm: recv with tag %d has no matching send and would wait "
                         "forever",
                         tag);
    return r.status;
}

static enum loom_status new_req(struct self_req **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return loom_fail(LOOM_ERR_OOM, "self comm: out of memory");
    (*out)->base.ops = &g_self_ops;
    return LOOM_OK;
}

static enum loom_status self_iallreduce(struct loom_comm *c, void *buf, int64_t count,
                                        enum loom_dtype dt, enum loom_redop op,
                                        struct loom_comm_req **req) {
    (void)c, (void)buf, (void)count, (void)dt, (void)op;
    struct self_req *r;
    LOOM_CHECK(new_req(&r));
    r->done = 1;
    *req = &r->base;
    return LOOM_OK;
}

/* one rank: its block is the whole buffer, already reduced */
static enum loom_status self_ireduce_scatter(struct loom_comm *c, void *buf, int64_t count,
                                             enum loom_dtype dt, enum loom_redop op,
                                             struct loom_comm_req **req) {
    return self_iallreduce(c, buf, count, dt, op, req);
}

/* one rank: its block is the whole buffer */
static enum loom_status self_iallgather(struct loom_comm *c, void *buf, int64_t count,
                                        enum loom_dtype dt, struct loom_comm_req **req) {
    return self_iallreduce(c, buf, count, dt, LOOM_REDOP_SUM, req);
}

static enum loom_status self_isend(struct loom_comm *c, const void *buf, int64_t count,
                                   enum loom_dtype dt, int peer, int tag,
                                   struct loom_comm_req **req) {
    struct self_req *r;
    LOOM_CHECK(new_req(&r));
    enum loom_status s = self_send(c, buf, count, dt, peer, tag);
    if (s != LOOM_OK) {
        free(r);
        return s;
    }
    r->done = 1;
    *req = &r->base;
    return LOOM_OK;
}

static enum loom_status self_irecv(struct loom_comm *c, void *buf, int64_t count,
                                   enum loom_dtype dt, int peer, int tag,
                                   struct loom_comm_req **req) {
    (void)peer;
    struct self_state *st = c->impl;
    struct self_req *r;
    LOOM_CHECK(new_req(&r));
    r->st = st;
    r->buf = buf;
    r->cap = nb(count, dt);
    r->tag = tag;
    if (!self_take(st, r)) { /* post it, behind the irecvs already posted */
        struct self_req **pp = &st->posted;
        while (*pp) pp = &(*pp)->next;
        *pp = r;
    }
    *req = &r->base;
    return LOOM_OK;
}

static enum loom_status self_wait(struct loom_comm_req *req) {
    struct self_req *r = (struct self_req *)req;
    enum loom_status s = r->status;
    if (!r->done) {
        if (r->st) { /* unlink from the posted list */
            for (struct self_req **pp = &r->st->posted; *pp; pp = &(*pp)->next)
                if (*pp == r) {
                    *pp = r->next;
                    break;
                }
        }
        s = loom_fail(LOOM_ERR_COMM,
                      "self comm: irecv with tag %d has no matching send and would wait forever",
                      r->tag);
    }
    free(r);
    return s;
}

static enum loom_status self_test(struct loom_comm_req *req, int *done) {
    /* a self send completes at once; a receive completes when its send arrives (never later,
     * since there is no one else to send it) */
    struct self_req *r = (struct self_req *)req;
    *done = r->done;
    if (r->done) return self_wait(req);
    return LOOM_OK;
}

static const struct loom_comm_ops g_self_ops = {
    .name = "self",
    .split = self_split,
    .free = self_free,
    .allreduce = self_allreduce,
    .reduce_scatter = self_reduce_scatter,
    .allgather = self_allgather,
    .alltoall = self_allgather, /* one block: a copy */
    .alltoallv = self_alltoallv,
    .broadcast = self_broadcast,
    .send = self_send,
    .recv = self_recv,
    .barrier = self_barrier,
    .iallreduce = self_iallreduce,
    .ireduce_scatter = self_ireduce_scatter,
    .iallgather = self_iallgather,
    .isend = self_isend,
    .irecv = self_irecv,
    .wait = self_wait,
    .test = self_test,
};
