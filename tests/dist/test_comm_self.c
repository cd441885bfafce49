/* The "self" comm backend (a world of one, no MPI) and the single-rank parallel state: every
 * collective is a copy or a no-op, point-to-point to oneself goes through the queue, an
 * unmatched receive is an error instead of a hang, counters stay 0, and the TP/SP regions are
 * identities. Runs directly, without mpirun. */
#include <stdlib.h>

#include "comm_check.h"
#include "loom/parallel.h"
#include "loom/tp.h"

static void test_collectives(struct loom_comm *w) {
    EXPECT(loom_comm_rank(w) == 0 && loom_comm_size(w) == 1);
    EXPECT(strcmp(loom_comm_backend_name(w), "self") == 0);
    EXPECT(!loom_comm_device_memory(w) && !loom_comm_stream_ordered(w));
    float f[4] = {1, 2, 3, 4}, g[4] = {0};
    EXPECT_OK(loom_comm_allreduce(w, f, 4, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    EXPECT(f[0] == 1 && f[3] == 4);
    EXPECT_OK(loom_comm_reduce_scatter(w, g, f, 4, LOOM_DTYPE_F32, LOOM_REDOP_MAX));
    EXPECT(memcmp(f, g, sizeof f) == 0);
    memset(g, 0, sizeof g);
    EXPECT_OK(loom_comm_allgather(w, g, f, 4, LOOM_DTYPE_F32));
    EXPECT(memcmp(f, g, sizeof f) == 0);
    memset(g, 0, sizeof g);
    EXPECT_OK(loom_comm_alltoall(w, g, f, 4, LOOM_DTYPE_F32));
    EXPECT(memcmp(f, g, sizeof f) == 0);
    int64_t sc = 2, sd = 1, rc = 2, rd = 2;
    memset(g, 0, sizeof g);
    EXPECT_OK(loom_comm_alltoallv(w, g, &rc, &rd, f, &sc, &sd, LOOM_DTYPE_F32));
    EXPECT(g[0] == 0 && g[1] == 0 && g[2] == 2 && g[3] == 3);
    rc = 1;
    EXPECT_FAIL(loom_comm_alltoallv(w, g, &rc, &rd, f, &sc, &sd, LOOM_DTYPE_F32),
                LOOM_ERR_INVALID_ARG, "sends 2 elements to itself but expects 1");
    EXPECT_OK(loom_comm_broadcast(w, f, 4, LOOM_DTYPE_F32, 0));
    EXPECT_FAIL(loom_comm_broadcast(w, f, 4, LOOM_DTYPE_F32, 1), LOOM_ERR_INVALID_ARG, "root 1");
    EXPECT_OK(loom_comm_barrier(w));
    uint16_t h[2] = {0};
    EXPECT_FAIL(loom_comm_allreduce(w, h, 2, LOOM_DTYPE_BF16, LOOM_REDOP_SUM),
                LOOM_ERR_UNSUPPORTED, "SUM reduction of BF16 is not supported by the 'self'");
    struct loom_comm_req *rq;
    EXPECT_OK(loom_comm_iallreduce(w, f, 4, LOOM_DTYPE_F32, LOOM_REDOP_SUM, &rq));
    EXPECT_OK(loom_comm_wait(rq));
    for (int k = 0; k < LOOM_COLL_COUNT; k++) EXPECT(loom_comm_bytes(w, (enum loom_coll)k) == 0);
}

static void test_p2p(struct loom_comm *w) {
    int a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, x[3] = {0}, y[3] = {0};
    /* queued sends, received by tag, oldest first within a tag */
    EXPECT_OK(loom_comm_send(w, a, 3, LOOM_DTYPE_I32, 0, 1));
    EXPECT_OK(loom_comm_send(w, b, 3, LOOM_DTYPE_I32, 0, 2));
    EXPECT_OK(loom_comm_recv(w, x, 3, LOOM_DTYPE_I32, 0, 2));
    EXPECT(x[0] == 4 && x[2] == 6);
    EXPECT_OK(loom_comm_recv(w, x, 3, LOOM_DTYPE_I32, 0, 1));
    EXPECT(x[0] == 1 && x[2] == 3);
    /* an irecv posted before its send */
    struct loom_comm_req *rr, *rs, *r2;
    EXPECT_OK(loom_comm_irecv(w, y, 3, LOOM_DTYPE_I32, 0, 7, &rr));
    EXPECT_OK(loom_comm_irecv(w, x, 3, LOOM_DTYPE_I32, 0, 7, &r2));
    EXPECT_OK(loom_comm_isend(w, b, 3, LOOM_DTYPE_I32, 0, 7, &rs));
    EXPECT_OK(loom_comm_send(w, a, 3, LOOM_DTYPE_I32, 0, 7));
    EXPECT_OK(loom_comm_wait(rs));
    EXPECT_OK(loom_comm_wait(r2));
    EXPECT_OK(loom_comm_wait(rr));
    EXPECT(y[0] == 4 && x[0] == 1); /* posted order */
    /* nothing to receive: an error, not a hang */
    EXPECT_FAIL(loom_comm_recv(w, x, 3, LOOM_DTYPE_I32, 0, 3), LOOM_ERR_COMM,
                "no matching send");
    EXPECT_OK(loom_comm_irecv(w, x, 3, LOOM_DTYPE_I32, 0, 3, &rr));
    EXPECT_FAIL(loom_comm_wait(rr), LOOM_ERR_COMM, "irecv with tag 3 has no matching send");
    /* too long for the buffer */
    EXPECT_OK(loom_comm_send(w, a, 3, LOOM_DTYPE_I32, 0, 4));
    EXPECT_FAIL(loom_comm_recv(w, x, 2, LOOM_DTYPE_I32, 0, 4), LOOM_ERR_COMM, "larger than");
    EXPECT_FAIL(loom_comm_send(w, a, 3, LOOM_DTYPE_I32, 1, 0), LOOM_ERR_INVALID_ARG, "peer 1");
    /* a message left in the queue is freed with the comm */
    EXPECT_OK(loom_comm_send(w, a, 3, LOOM_DTYPE_I32, 0, 5));
    EXPECT(loom_comm_bytes(w, LOOM_COLL_SENDRECV) == 0); /* a group of one sends nothing */
}

static void test_split(struct loom_comm *w) {
    struct loom_comm *s = NULL;
    EXPECT_OK(loom_comm_split(&s, w, 3, 0));
    EXPECT(s && loom_comm_size(s) == 1);
    loom_comm_free(s);
    EXPECT_OK(loom_comm_split(&s, w, -1, 0));
    EXPECT(s == NULL);
}

static void test_parallel_single(void) {
    struct loom_parallel p;
    EXPECT_OK(loom_parallel_init_single(&p));
    EXPECT(p.world_size == 1 && p.rank == 0 && p.vpp == 1 && !p.sequence_parallel);
    for (int d = 0; d < LOOM_PDIM_COUNT; d++) {
        EXPECT(p.size[d] == 1 && p.coord[d] == 0);
        EXPECT(p.group[d] && loom_comm_size(p.group[d]) == 1);
    }
    EXPECT(p.embedding && loom_comm_size(p.embedding) == 1);
    EXPECT(loom_log_rank() == 0 && loom_log_world() == 1);
    /* regions are identities with tp = 1 */
    float full[2 * 3 * 4], shard[2 * 3 * 4], buf[4] = {1, 2, 3, 4};
    for (int i = 0; i < 24; i++) full[i] = (float)i * 0.5f;
    EXPECT_OK(loom_tp_allreduce(&p, buf, 4));
    EXPECT(buf[0] == 1 && buf[3] == 4);
    memcpy(shard, full, sizeof full);
    memset(full, 0, sizeof full);
    EXPECT_OK(loom_sp_allgather(&p, full, shard, 2, 3, 4, NULL));
    EXPECT(memcmp(shard, full, sizeof full) == 0);
    memset(shard, 0, sizeof shard);
    EXPECT_OK(loom_sp_reduce_scatter(&p, shard, full, 2, 3, 4, NULL));
    EXPECT(memcmp(shard, full, sizeof full) == 0);
    struct loom_comm *g;
    EXPECT_OK(loom_parallel_group(&p, 1u << LOOM_PDIM_DP | 1u << LOOM_PDIM_CP, &g));
    EXPECT(g && loom_comm_size(g) == 1);
    loom_comm_free(g);
    loom_parallel_free(&p);
    EXPECT(p.world == NULL);

    /* the layout checks need no second rank */
    struct loom_comm *w;
    EXPECT_OK(loom_comm_world(&w, "self", NULL, NULL));
    EXPECT_FAIL(loom_parallel_init(&p, w, 2, 1, 1, 1, 1, 0), LOOM_ERR_INVALID_ARG,
                "--tensor-model-parallel-size 2 does not divide world size 1; valid: products "
                "that divide 1 (1)");
    EXPECT_FAIL(loom_parallel_init(&p, w, 1, 1, 1, 1, 0, 0), LOOM_ERR_INVALID_ARG,
                "--virtual-pipeline-model-parallel-size 0");
    EXPECT_FAIL(loom_parallel_init(&p, w, 1, 1, -2, 1, 1, 0), LOOM_ERR_INVALID_ARG,
                "--expert-model-parallel-size -2: must be at least 1");
    loom_comm_free(w);
}

int main(void) {
    struct loom_comm *w;
    if (loom_comm_world(&w, "auto", NULL, NULL) != LOOM_OK) { /* not launched by mpirun: self */
        loom_print_error();
        return 1;
    }
    test_collectives(w);
    test_p2p(w);
    test_split(w);
    test_parallel_single();
    loom_comm_free(w);
    struct loom_comm *x;
    EXPECT_FAIL(loom_comm_world(&x, "gloo", NULL, NULL), LOOM_ERR_INVALID_ARG,
                "unknown communication backend 'gloo'");
    loom_comm_finalize(); /* MPI never started: nothing to do */
    if (g_failures) {
        fprintf(stderr, "test_comm_self: %d failure(s)\n", g_failures);
        return 1;
    }
    printf("test_comm_self: ok\n");
    return 0;
}
