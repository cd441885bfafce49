/* The device-capable communication backends on device buffers, under mpirun:
 *
 *   mpirun -np N comm_device_check [nccl|mpi-staged]        (default: nccl)
 *
 * nccl moves device buffers with NCCL and needs one GPU per rank; mpi-staged copies them into
 * pinned host memory, runs the MPI operation there and copies the result back, so several ranks
 * may share a GPU. Either way a rank takes the device of its local rank modulo the visible
 * devices, as the trainer does (loom_backend_create with -1): with one GPU visible every rank
 * takes device 0. scripts/gpu_check.sh runs nccl with 2 ranks on 2 GPUs and mpi-staged with 2
 * ranks sharing one GPU.
 *
 * Every collective on device buffers (all-reduce of F32/F64/I32 with SUM/MAX/MIN, reduce-scatter,
 * all-gather in and out of place, broadcast, all-to-all in and out of place, all-to-allv, and
 * all-to-allv into a receive buffer larger than its blocks, whose gaps before, between and after
 * the blocks must keep their contents), the same on host buffers (the MPI route), groups from
 * split (including a rank in no group), point-to-point with tags of both parities received in the
 * opposite order of their sending, both ranks sending large messages before receiving, test
 * polling, and iallreduce with work queued on the compute stream before its wait (nccl overlaps
 * the two; mpi-staged completes the reduction before iallreduce returns). Values are small
 * integers, so every sum is exact and compared for equality. Data is produced and consumed by
 * backend ops on the compute stream, which checks the ordering of communication with compute.
 *
 * Exit status 0: all passed; 1: a check failed; 2: a bad argument; 77: the backend named is not
 * built in (nccl needs CUDA, MPI and NCCL; mpi-staged needs CUDA and MPI).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/backend.h"
#include "loom/comm.h"
#include "loom/log.h"

#define USAGE "usage: mpirun -np N comm_device_check [nccl|mpi-staged]"

/* NULL when the backend is built in, else why not */
static const char *missing(const char *backend) {
    if (strcmp(backend, "nccl") == 0) {
#ifndef LOOM_HAVE_NCCL
        return "built without the nccl backend (it needs CUDA, MPI and nccl.h when configuring)";
#endif
    } else {
#if !defined(LOOM_HAVE_CUDA) || !defined(LOOM_HAVE_MPI)
        return "built without the mpi-staged backend (it needs CUDA and MPI)";
#endif
    }
    return NULL;
}

#if !defined(LOOM_HAVE_CUDA) || !defined(LOOM_HAVE_MPI)
static int run(const char *backend, int *argc, char ***argv) {
    (void)backend;
    (void)argc;
    (void)argv;
    return 77; /* not reached: missing() names every backend here */
}
#else
#include <cuda_runtime_api.h>

static struct loom_backend *g_be;
static const char *g_name; /* the backend */
static int g_rank, g_size, g_fail, g_pass;

static void check(int ok, const char *what) {
    if (ok) {
        g_pass++;
        if (g_rank == 0) printf("ok   %s\n", what);
    } else {
        g_fail++;
        printf("FAIL [%s rank %d] %s\n", g_name, g_rank, what);
    }
    fflush(stdout);
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != LOOM_OK) {                                                                   \
            loom_print_error();                                                                    \
            printf("FAIL [%s rank %d] %s\n", g_name, g_rank, #call);                               \
            loom_comm_abort_job(1);                                                                \
        }                                                                                          \
    } while (0)

static void *dev(size_t bytes) {
    void *p = g_be->ops->malloc(g_be, bytes);
    if (!p) {
        printf("FAIL [%s rank %d] device allocation of %zu bytes\n", g_name, g_rank, bytes);
        loom_comm_abort_job(1);
    }
    return p;
}

static void put(void *d, const void *h, size_t bytes) { g_be->ops->to_device(g_be, d, h, bytes); }
static void get(void *h, const void *d, size_t bytes) { g_be->ops->to_host(g_be, h, d, bytes); }

/* value of element i on rank r (small integers: sums are exact in float) */
static float val(int r, int64_t i) { return (float)((r + 1) * 10 + (i % 97)); }

static void test_allreduce(struct loom_comm *w) {
    int64_t n = 1 << 20;
    float *h = malloc((size_t)n * sizeof(float));
    float *d = dev((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = val(g_rank, i);
    put(d, h, (size_t)n * sizeof(float));
    /* compute-stream work right before the collective: x *= 2 */
    g_be->ops->scale(g_be, d, 2.0f, n);
    CK(loom_comm_allreduce(w, d, n, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    g_be->ops->scale(g_be, d, 0.5f, n); /* and right after it */
    get(h, d, (size_t)n * sizeof(float));
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        float want = 0;
        for (int r = 0; r < g_size; r++) want += val(r, i);
        ok = h[i] == want;
    }
    check(ok, "allreduce F32 SUM on device, ordered between compute-stream ops");

    for (int op = LOOM_REDOP_MAX; op <= LOOM_REDOP_MIN; op++) {
        for (int64_t i = 0; i < n; i++) h[i] = val(g_rank, i) * (g_rank % 2 ? -1.0f : 1.0f);
        put(d, h, (size_t)n * sizeof(float));
        CK(loom_comm_allreduce(w, d, n, LOOM_DTYPE_F32, (enum loom_redop)op));
        get(h, d, (size_t)n * sizeof(float));
        ok = 1;
        for (int64_t i = 0; i < n && ok; i++) {
            float want = op == LOOM_REDOP_MAX ? -1e30f : 1e30f;
            for (int r = 0; r < g_size; r++) {
                float v = val(r, i) * (r % 2 ? -1.0f : 1.0f);
                want = op == LOOM_REDOP_MAX ? (v > want ? v : want) : (v < want ? v : want);
            }
            ok = h[i] == want;
        }
        check(ok, op == LOOM_REDOP_MAX ? "allreduce F32 MAX on device" : "allreduce F32 MIN on device");
    }

    double hd[3] = {1.5 * (g_rank + 1), -2.0, 1e-300}, *dd = dev(sizeof hd);
    put(dd, hd, sizeof hd);
    CK(loom_comm_allreduce(w, dd, 3, LOOM_DTYPE_F64, LOOM_REDOP_SUM));
    get(hd, dd, sizeof hd);
    double s1 = 0;
    for (int r = 0; r < g_size; r++) s1 += 1.5 * (r + 1);
    check(hd[0] == s1 && hd[1] == -2.0 * g_size && hd[2] == 1e-300 * g_size,
          "allreduce F64 SUM on device");

    int32_t hi[2] = {g_rank, 7}, *di = dev(sizeof hi);
    put(di, hi, sizeof hi);
    CK(loom_comm_allreduce(w, di, 2, LOOM_DTYPE_I32, LOOM_REDOP_MAX));
    get(hi, di, sizeof hi);
    check(hi[0] == g_size - 1 && hi[1] == 7, "allreduce I32 MAX on device");

    /* host buffers: the MPI route */
    double host[2] = {(double)g_rank, 1.0};
    CK(loom_comm_allreduce(w, host, 2, LOOM_DTYPE_F64, LOOM_REDOP_SUM));
    check(host[0] == g_size * (g_size - 1) / 2.0 && host[1] == g_size, "allreduce F64 on host memory");
    float hf[4] = {1, 2, 3, (float)g_rank};
    CK(loom_comm_allreduce(w, hf, 4, LOOM_DTYPE_F32, LOOM_REDOP_MAX));
    check(hf[3] == (float)(g_size - 1) && hf[0] == 1.0f, "allreduce F32 MAX on host memory");
    g_be->ops->free(g_be, dd);
    g_be->ops->free(g_be, di);
    g_be->ops->free(g_be, d);
    free(h);
}

static void test_gather_scatter(struct loom_comm *w) {
    int64_t n = 300001; /* per rank; odd on purpose */
    size_t blk = (size_t)n * sizeof(float);
    float *h = malloc(blk * (size_t)g_size);
    float *full = dev(blk * (size_t)g_size), *part = dev(blk);
    for (int64_t i = 0; i < n; i++) h[i] = val(g_rank, i);
    put(part, h, blk);
    CK(loom_comm_allgather(w, full, part, n, LOOM_DTYPE_F32));
    get(h, full, blk * (size_t)g_size);
    int ok = 1;
    for (int r = 0; r < g_size && ok; r++)
        for (int64_t i = 0; i < n && ok; i++) ok = h[r * n + i] == val(r, i);
    check(ok, "allgather on device");

    /* in place: this rank's block already at its place */
    for (int64_t i = 0; i < n * g_size; i++) h[i] = -1.0f;
    for (int64_t i = 0; i < n; i++) h[g_rank * n + i] = val(g_rank, i) + 1;
    put(full, h, blk * (size_t)g_size);
    CK(loom_comm_allgather(w, full, full + g_rank * n, n, LOOM_DTYPE_F32));
    get(h, full, blk * (size_t)g_size);
    ok = 1;
    for (int r = 0; r < g_size && ok; r++)
        for (int64_t i = 0; i < n && ok; i++) ok = h[r * n + i] == val(r, i) + 1;
    check(ok, "allgather in place on device");

    for (int r = 0; r < g_size; r++)
        for (int64_t i = 0; i < n; i++) h[r * n + i] = val(g_rank, i) + r;
    put(full, h, blk * (size_t)g_size);
    CK(loom_comm_reduce_scatter(w, part, full, n, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    get(h, part, blk);
    ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        float want = 0;
        for (int r = 0; r < g_size; r++) want += val(r, i) + g_rank;
        ok = h[i] == want;
    }
    check(ok, "reduce_scatter on device");

    for (int64_t i = 0; i < n; i++) h[i] = g_rank == g_size - 1 ? val(99, i) : 0.0f;
    put(part, h, blk);
    CK(loom_comm_broadcast(w, part, n, LOOM_DTYPE_F32, g_size - 1));
    get(h, part, blk);
    ok = 1;
    for (int64_t i = 0; i < n && ok; i++) ok = h[i] == val(99, i);
    check(ok, "broadcast on device from the last rank");

    /* all-to-all: block r of rank q holds 1000 q + r */
    int64_t m = 4099;
    float *a = malloc((size_t)(m * g_size) * sizeof(float));
    float *da = dev((size_t)(m * g_size) * sizeof(float)), *db = dev((size_t)(m * g_size) * sizeof(float));
    for (int r = 0; r < g_size; r++)
        for (int64_t i = 0; i < m; i++) a[r * m + i] = (float)(1000 * g_rank + r) + (float)(i % 5);
    put(da, a, (size_t)(m * g_size) * sizeof(float));
    CK(loom_comm_alltoall(w, db, da, m, LOOM_DTYPE_F32));
    CK(loom_comm_alltoall(w, da, da, m, LOOM_DTYPE_F32)); /* in place */
    int ok2 = 1;
    get(a, db, (size_t)(m * g_size) * sizeof(float));
    ok = 1;
    for (int r = 0; r < g_size && ok; r++)
        for (int64_t i = 0; i < m && ok; i++) ok = a[r * m + i] == (float)(1000 * r + g_rank) + (float)(i % 5);
    get(a, da, (size_t)(m * g_size) * sizeof(float));
    for (int r = 0; r < g_size && ok2; r++)
        for (int64_t i = 0; i < m && ok2; i++) ok2 = a[r * m + i] == (float)(1000 * r + g_rank) + (float)(i % 5);
    check(ok, "alltoall on device");
    check(ok2, "alltoall in place on device");

    /* all-to-allv: rank q sends r + 1 elements of value 100 q + r to rank r */
    int64_t *sc = calloc((size_t)g_size * 4, sizeof(int64_t)), *sd = sc + g_size, *rc = sd + g_size,
            *rd = rc + g_size;
    int64_t so = 0, ro = 0;
    for (int r = 0; r < g_size; r++) {
        sc[r] = r + 1;
        sd[r] = so;
        so += sc[r];
        rc[r] = g_rank + 1;
        rd[r] = ro;
        ro += rc[r];
    }
    for (int r = 0; r < g_size; r++)
        for (int64_t i = 0; i < sc[r]; i++) a[sd[r] + i] = (float)(100 * g_rank + r);
    put(da, a, (size_t)so * sizeof(float));
    CK(loom_comm_alltoallv(w, db, rc, rd, da, sc, sd, LOOM_DTYPE_F32));
    get(a, db, (size_t)ro * sizeof(float));
    ok = 1;
    for (int r = 0; r < g_size && ok; r++)
        for (int64_t i = 0; i < rc[r] && ok; i++) ok = a[rd[r] + i] == (float)(100 * r + g_rank);
    check(ok, "alltoallv on device");
    free(sc);
    free(a);
    g_be->ops->free(g_be, da);
    g_be->ops->free(g_be, db);
    g_be->ops->free(g_be, full);
    g_be->ops->free(g_be, part);
    free(h);
}

/* element i of the block rank q sends rank r (below 2^24: exact in float) */
static float gval(int q, int r, int64_t i) {
    return (float)(100000 * q + 10000 * r + i);
}
static int64_t gcount(int q, int r) {
    return 1000 + 37 * q + 101 * r;
}

/* All-to-allv into a receive buffer larger than its blocks: the blocks lie in the reverse order
 * of their source ranks, with 2 + q elements before the block from rank q and 5 after the last
 * one, all filled beforehand with a sentinel that must survive the call. The send blocks have one
 * element before each that must not be sent. Two rounds with different sentinels. */
static void test_alltoallv_gaps(struct loom_comm *w) {
    const float unsent = -99.0f, sentinels[2] = {-4242.0f, 7777.0f};
    int64_t *sc = calloc((size_t)g_size * 4, sizeof(int64_t)), *sd = sc + g_size, *rc = sd + g_size,
            *rd = rc + g_size;
    int64_t so = 0, ro = 0;
    for (int r = 0; r < g_size; r++) {
        so += 1;
        sd[r] = so;
        sc[r] = gcount(g_rank, r);
        so += sc[r];
    }
    for (int q = g_size - 1; q >= 0; q--) {
        ro += 2 + q;
        rd[q] = ro;
        rc[q] = gcount(q, g_rank);
        ro += rc[q];
    }
    const int64_t rlen = ro + 5;
    float *hs = malloc((size_t)so * sizeof(float)), *hr = malloc((size_t)rlen * sizeof(float));
    float *back = malloc((size_t)so * sizeof(float));
    char *in_block = calloc((size_t)rlen, 1);
    for (int q = 0; q < g_size; q++)
        memset(in_block + rd[q], 1, (size_t)rc[q]);
    for (int64_t i = 0; i < so; i++)
        hs[i] = unsent;
    for (int r = 0; r < g_size; r++)
        for (int64_t i = 0; i < sc[r]; i++)
            hs[sd[r] + i] = gval(g_rank, r, i);
    float *ds = dev((size_t)so * sizeof(float)), *dr = dev((size_t)rlen * sizeof(float));
    put(ds, hs, (size_t)so * sizeof(float));
    int blocks = 1, gaps = 1, sent = 1;
    for (int round = 0; round < 2; round++) {
        for (int64_t i = 0; i < rlen; i++)
            hr[i] = sentinels[round];
        put(dr, hr, (size_t)rlen * sizeof(float));
        CK(loom_comm_alltoallv(w, dr, rc, rd, ds, sc, sd, LOOM_DTYPE_F32));
        get(hr, dr, (size_t)rlen * sizeof(float));
        for (int q = 0; q < g_size && blocks; q++)
            for (int64_t i = 0; i < rc[q] && blocks; i++)
                blocks = hr[rd[q] + i] == gval(q, g_rank, i);
        for (int64_t i = 0; i < rlen && gaps; i++)
            gaps = in_block[i] || hr[i] == sentinels[round];
        get(back, ds, (size_t)so * sizeof(float));
        sent = sent && memcmp(back, hs, (size_t)so * sizeof(float)) == 0;
    }
    check(blocks, "alltoallv on device into a buffer with gaps: every block in place");
    check(gaps, "alltoallv on device into a buffer with gaps: the gaps before, between and after "
                "the blocks keep their contents");
    check(sent, "alltoallv on device into a buffer with gaps: the send buffer unchanged");
    g_be->ops->free(g_be, ds);
    g_be->ops->free(g_be, dr);
    free(in_block);
    free(back);
    free(hr);
    free(hs);
    free(sc);
}

static void test_split(struct loom_comm *w) {
    struct loom_comm *even = NULL, *solo = NULL;
    /* ranks of even world rank form a group; the others join none */
    CK(loom_comm_split(&even, w, g_rank % 2 == 0 ? 0 : -1, g_rank));
    check((g_rank % 2 == 0) == (even != NULL), "split: a negative color joins no group");
    /* one group per rank, ordered backwards */
    CK(loom_comm_split(&solo, w, g_rank, 7));
    check(solo && loom_comm_size(solo) == 1 && loom_comm_rank(solo) == 0, "split into groups of one");
    struct loom_comm *rev = NULL;
    CK(loom_comm_split(&rev, w, 0, g_size - g_rank));
    check(rev && loom_comm_rank(rev) == g_size - 1 - g_rank, "split: ranks ordered by key");
    float *d = dev(64 * sizeof(float));
    float h[64];
    for (int i = 0; i < 64; i++) h[i] = (float)loom_comm_rank(rev);
    put(d, h, sizeof h);
    CK(loom_comm_allreduce(rev, d, 64, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    get(h, d, sizeof h);
    check(h[63] == (float)(g_size * (g_size - 1) / 2), "allreduce on a split group");
    CK(loom_comm_allreduce(solo, d, 64, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    get(h, d, sizeof h);
    check(h[0] == (float)(g_size * (g_size - 1) / 2), "allreduce on a group of one");
    g_be->ops->free(g_be, d);
    loom_comm_free(even);
    loom_comm_free(solo);
    loom_comm_free(rev);
}

static void test_p2p(struct loom_comm *w) {
    if (g_size < 2) return;
    int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
    /* large messages (beyond NCCL's buffers, and MPI's eager limit): everyone sends two, then
     * receives two, in the other order of tag parity than they were sent */
    int64_t n = 16 << 20; /* 64 MiB */
    float *h = malloc((size_t)n * sizeof(float));
    float *s0 = dev((size_t)n * sizeof(float)), *s1 = dev((size_t)n * sizeof(float));
    float *r0 = dev((size_t)n * sizeof(float)), *r1 = dev((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = val(g_rank, i);
    put(s0, h, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = -val(g_rank, i);
    put(s1, h, (size_t)n * sizeof(float));
    struct loom_comm_req *q[4];
    CK(loom_comm_isend(w, s1, n, LOOM_DTYPE_F32, next, 3, &q[0])); /* odd tag first */
    CK(loom_comm_isend(w, s0, n, LOOM_DTYPE_F32, next, 8, &q[1]));
    CK(loom_comm_irecv(w, r0, n, LOOM_DTYPE_F32, prev, 8, &q[2])); /* even tag received first */
    CK(loom_comm_irecv(w, r1, n, LOOM_DTYPE_F32, prev, 3, &q[3]));
    for (int i = 0; i < 4; i++) CK(loom_comm_wait(q[i]));
    get(h, r0, (size_t)n * sizeof(float));
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) ok = h[i] == val(prev, i);
    get(h, r1, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n && ok; i++) ok = h[i] == -val(prev, i);
    check(ok, "isend x2 then irecv x2 around the ring, 64 MiB, tags of both parities crossed");

    /* test polling */
    CK(loom_comm_isend(w, s0, n, LOOM_DTYPE_F32, next, 2, &q[0]));
    CK(loom_comm_irecv(w, r1, n, LOOM_DTYPE_F32, prev, 2, &q[1]));
    int done[2] = {0, 0}, polls = 0;
    double t0 = loom_time_s();
    while ((!done[0] || !done[1]) && loom_time_s() - t0 < 60) {
        for (int i = 0; i < 2; i++)
            if (!done[i]) CK(loom_comm_test(q[i], &done[i]));
        polls++;
    }
    check(done[0] && done[1], "test reports both requests done");
    get(h, r1, (size_t)n * sizeof(float));
    ok = 1;
    for (int64_t i = 0; i < n && ok; i++) ok = h[i] == val(prev, i);
    check(ok, "data received after test reported done");

    /* blocking send/recv pairs: even ranks send first */
    int64_t k = 1000;
    if (g_rank % 2 == 0) {
        CK(loom_comm_send(w, s0, k, LOOM_DTYPE_F32, next, 0));
        CK(loom_comm_recv(w, r0, k, LOOM_DTYPE_F32, prev, 0));
    } else {
        CK(loom_comm_recv(w, r0, k, LOOM_DTYPE_F32, prev, 0));
        CK(loom_comm_send(w, s0, k, LOOM_DTYPE_F32, next, 0));
    }
    get(h, r0, (size_t)k * sizeof(float));
    ok = 1;
    for (int64_t i = 0; i < k && ok; i++) ok = h[i] == val(prev, i);
    check(ok, "blocking send/recv");

    /* host buffers go over MPI */
    int32_t hs[3] = {g_rank, 5, 6}, hr[3] = {0, 0, 0};
    CK(loom_comm_isend(w, hs, 3, LOOM_DTYPE_I32, next, 1, &q[0]));
    CK(loom_comm_irecv(w, hr, 3, LOOM_DTYPE_I32, prev, 1, &q[1]));
    CK(loom_comm_wait(q[1]));
    CK(loom_comm_wait(q[0]));
    check(hr[0] == prev && hr[2] == 6, "isend/irecv of host memory");
    g_be->ops->free(g_be, s0);
    g_be->ops->free(g_be, s1);
    g_be->ops->free(g_be, r0);
    g_be->ops->free(g_be, r1);
    free(h);
    (void)polls;
}

static void test_iallreduce(struct loom_comm *w) {
    int64_t n = 8 << 20;
    float *h = malloc((size_t)n * sizeof(float));
    float *a = dev((size_t)n * sizeof(float)), *b = dev((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = val(g_rank, i);
    put(a, h, (size_t)n * sizeof(float));
    put(b, h, (size_t)n * sizeof(float));
    struct loom_comm_req *q;
    CK(loom_comm_iallreduce(w, a, n, LOOM_DTYPE_F32, LOOM_REDOP_SUM, &q));
    /* unrelated compute queued before the wait */
    for (int i = 0; i < 20; i++) g_be->ops->scale(g_be, b, 1.0f, n);
    CK(loom_comm_wait(q));
    g_be->ops->axpy(g_be, b, 1.0f, a, n); /* after wait: sees the reduced a */
    get(h, b, (size_t)n * sizeof(float));
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        float want = val(g_rank, i);
        for (int r = 0; r < g_size; r++) want += val(r, i);
        ok = h[i] == want;
    }
    check(ok,
          "iallreduce with compute queued before its wait, then consumed on the compute stream");
    g_be->ops->free(g_be, a);
    g_be->ops->free(g_be, b);
    free(h);
}

/* The in-place reduce-scatter started with work queued before its wait; this rank's block
 * consumed on the compute stream after it (the other blocks are not looked at) */
static void test_ireduce_scatter(struct loom_comm *w) {
    int64_t n = 1 << 20, all = n * g_size;
    float *h = malloc((size_t)all * sizeof(float));
    float *a = dev((size_t)all * sizeof(float)), *b = dev((size_t)n * sizeof(float));
    for (int64_t i = 0; i < all; i++)
        h[i] = val(g_rank, i);
    put(a, h, (size_t)all * sizeof(float));
    put(b, h, (size_t)n * sizeof(float));
    struct loom_comm_req *q;
    CK(loom_comm_ireduce_scatter(w, a, n, LOOM_DTYPE_F32, LOOM_REDOP_SUM, &q));
    for (int i = 0; i < 20; i++)
        g_be->ops->scale(g_be, b, 1.0f, n);
    CK(loom_comm_wait(q));
    g_be->ops->axpy(g_be, b, 1.0f, a + (size_t)g_rank * (size_t)n, n);
    get(h, b, (size_t)n * sizeof(float));
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        float want = val(g_rank, i);
        for (int r = 0; r < g_size; r++)
            want += val(r, g_rank * n + i);
        ok = h[i] == want;
    }
    check(ok, "ireduce_scatter in place with compute queued before its wait, its block consumed "
              "on the compute stream");
    /* then every rank's block gathered back in place: a whole all-reduce */
    CK(loom_comm_iallgather(w, a, n, LOOM_DTYPE_F32, &q));
    CK(loom_comm_wait(q));
    g_be->ops->zero(g_be, b, (size_t)n * sizeof(float));
    h = realloc(h, (size_t)all * sizeof(float));
    get(h, a, (size_t)all * sizeof(float));
    ok = 1;
    for (int64_t i = 0; i < all && ok; i++) {
        float want = 0;
        for (int r = 0; r < g_size; r++)
            want += val(r, i);
        ok = h[i] == want;
    }
    check(ok, "iallgather in place after it: every block reduced");
    g_be->ops->free(g_be, a);
    g_be->ops->free(g_be, b);
    free(h);
}

/* The device of each rank, as rank 0 prints it: "0 0 (of 1 visible)" */
static void report_devices(struct loom_comm *w) {
    int d = -1, n = 0;
    if (cudaGetDevice(&d) != cudaSuccess || cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        d = -1;
    }
    int32_t *all = calloc((size_t)g_size, sizeof(int32_t)), mine = d;
    CK(loom_comm_allgather(w, all, &mine, 1, LOOM_DTYPE_I32));
    if (g_rank == 0) {
        printf("comm_device_check %s: %d ranks on devices", g_name, g_size);
        for (int r = 0; r < g_size; r++)
            printf(" %d", (int)all[r]);
        printf(" (of %d visible)\n", n);
        fflush(stdout);
    }
    free(all);
}

static int run(const char *backend, int *argc, char ***argv) {
    struct loom_comm *w;
    g_name = backend;
    if (loom_comm_world(&w, backend, argc, argv) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    g_rank = loom_comm_rank(w);
    g_size = loom_comm_size(w);
    /* -1: the local rank's device modulo the visible ones (nccl: one GPU per rank, which NCCL
     * requires; mpi-staged: ranks beyond the device count share, down to all on device 0) */
    if (loom_backend_create(&g_be, "cuda", -1) != LOOM_OK) {
        loom_print_error();
        loom_comm_abort_job(1);
    }
    loom_comm_set_stream(g_be->ops->stream(g_be));
    report_devices(w);
    check(strcmp(loom_comm_backend_name(w), backend) == 0 && loom_comm_device_memory(w) &&
              loom_comm_stream_ordered(w),
          "the backend takes device memory and is ordered with the compute stream");
    test_allreduce(w);
    test_gather_scatter(w);
    test_alltoallv_gaps(w);
    test_split(w);
    test_p2p(w);
    test_iallreduce(w);
    test_ireduce_scatter(w);
    double res[2] = {(double)g_pass, (double)g_fail};
    CK(loom_comm_allreduce(w, res, 2, LOOM_DTYPE_F64, LOOM_REDOP_SUM));
    if (g_rank == 0)
        printf("comm_device_check %s: %.0f passed, %.0f failed (over all ranks)\n", g_name, res[0],
               res[1]);
    loom_comm_free(w);
    loom_backend_destroy(g_be);
    loom_comm_finalize();
    return res[1] > 0 ? 1 : 0;
}
#endif

int main(int argc, char **argv) {
    const char *backend = argc > 1 ? argv[1] : "nccl";
    if (argc > 2) {
        fprintf(stderr, "comm_device_check: unexpected argument '%s'; " USAGE "\n", argv[2]);
        return 2;
    }
    if (strcmp(backend, "nccl") != 0 && strcmp(backend, "mpi-staged") != 0) {
        fprintf(stderr, "comm_device_check: unknown backend '%s'; valid: nccl, mpi-staged\n",
                backend);
        return 2;
    }
    const char *why = missing(backend);
    if (why) {
        printf("skipped: %s\n", why);
        return 77;
    }
    return run(backend, &argc, &argv);
}
