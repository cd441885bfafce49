/* Backend side of the collective interface (include/loom/comm.h).
 *
 * A process group is a struct loom_comm: the backend's table of operations, this rank's place in
 * the group, the volume counters and the backend's own state (impl). comm.c checks arguments,
 * keeps the counters and dispatches; a backend only moves bytes. Every entry receives arguments
 * that comm.c has already validated (counts >= 0, dtype and op in range, peers and roots inside
 * the group, no NULL buffer with a non-zero count).
 */
#ifndef LOOM_COMM_IMPL_H
#define LOOM_COMM_IMPL_H

#include <stdint.h>

#include "loom/comm.h"

struct loom_comm_ops {
    const char *name;
    /* non-zero: operations are ordered with the compute stream (see loom_comm_stream_ordered) */
    int stream_ordered;
    /* non-zero: buffers may be in device memory (see loom_comm_device_memory) */
    int device_memory;
    /* color < 0: this rank joins no group and *out is set to NULL. */
    enum loom_status (*split)(struct loom_comm **out, struct loom_comm *parent, int color,
                              int key);
    void (*free)(struct loom_comm *c); /* frees c->impl only; comm.c frees c */

    enum loom_status (*allreduce)(struct loom_comm *c, void *buf, int64_t count,
                                  enum loom_dtype dt, enum loom_redop op);
    enum loom_status (*reduce_scatter)(struct loom_comm *c, void *recv, const void *send,
                                       int64_t count, enum loom_dtype dt, enum loom_redop op);
    enum loom_status (*allgather)(struct loom_comm *c, void *recv, const void *send,
                                  int64_t count, enum loom_dtype dt);
    enum loom_status (*alltoall)(struct loom_comm *c, void *recv, const void *send,
                                 int64_t count, enum loom_dtype dt);
    enum loom_status (*alltoallv)(struct loom_comm *c, void *recv, const int64_t *recv_counts,
                                  const int64_t *recv_displs, const void *send,
                                  const int64_t *send_counts, const int64_t *send_displs,
                                  enum loom_dtype dt);
    enum loom_status (*broadcast)(struct loom_comm *c, void *buf, int64_t count,
                                  enum loom_dtype dt, int root);
    enum loom_status (*send)(struct loom_comm *c, const void *buf, int64_t count,
                             enum loom_dtype dt, int peer, int tag);
    enum loom_status (*recv)(struct loom_comm *c, void *buf, int64_t count, enum loom_dtype dt,
                             int peer, int tag);
    enum loom_status (*barrier)(struct loom_comm *c);

    /* Non-blocking: the backend allocates *req (with req->ops set); wait completes and frees. */
    enum loom_status (*iallreduce)(struct loom_comm *c, void *buf, int64_t count,
                                   enum loom_dtype dt, enum loom_redop op,
                                   struct loom_comm_req **req);
    /* in place, as loom_comm_ireduce_scatter */
    enum loom_status (*ireduce_scatter)(struct loom_comm *c, void *buf, int64_t count,
                                        enum loom_dtype dt, enum loom_redop op,
                                        struct loom_comm_req **req);
    /* in place, as loom_comm_iallgather */
    enum loom_status (*iallgather)(struct loom_comm *c, void *buf, int64_t count,
                                   enum loom_dtype dt, struct loom_comm_req **req);
    enum loom_status (*isend)(struct loom_comm *c, const void *buf, int64_t count,
                              enum loom_dtype dt, int peer, int tag, struct loom_comm_req **req);
    enum loom_status (*irecv)(struct loom_comm *c, void *buf, int64_t count, enum loom_dtype dt,
                              int peer, int tag, struct loom_comm_req **req);
    enum loom_status (*wait)(struct loom_comm_req *req);
    /* Non-blocking completion check; frees the request when it reports done. */
    enum loom_status (*test)(struct loom_comm_req *req, int *done);
};

struct loom_comm {
    const struct loom_comm_ops *ops;
    int rank, size;
    int64_t bytes[LOOM_COLL_COUNT]; /* see the convention in comm.h */
    void *impl;
};

/* Backends embed this as the first member of their request type. */
struct loom_comm_req {
    const struct loom_comm_ops *ops;
};

/* Allocate a comm with its counters cleared (comm.c). Returns NULL when out of memory. */
struct loom_comm *loom_comm_alloc(const struct loom_comm_ops *ops, int rank, int size,
                                  void *impl);

/* Backends. */
enum loom_status loom_comm_self_world(struct loom_comm **out);
#ifdef LOOM_HAVE_MPI
enum loom_status loom_comm_mpi_world(struct loom_comm **out, int *argc, char ***argv);
void loom_comm_mpi_finalize(void);
/* MPI_Abort(MPI_COMM_WORLD, code) when MPI is running; returns otherwise. */
void loom_comm_mpi_abort(int code);
/* Non-zero while MPI is initialised and not finalised. */
int loom_comm_mpi_active(void);
/* Largest element count handed to one MPI call; longer buffers go in pieces. For tests only
 * (the default is 1 << 30); n <= 0 restores the default. */
void loom_comm_mpi_set_max_chunk(int64_t n);
/* The start-up exchange of loom_comm_agree: starts MPI if it is not running (as
 * loom_comm_mpi_world would), gathers every rank's `failed` and `text` on rank 0, which decides
 * with loom_comm_agree_verdict, and tells every rank the outcome (*job_failed); rank 0 gets the
 * verdict's message in verdict[cap], the others an empty string. */
enum loom_status loom_comm_mpi_agree(int failed, const char *text, int *job_failed, char *verdict,
                                     size_t cap, int *argc, char ***argv);
#endif
#if defined(LOOM_HAVE_CUDA) && defined(LOOM_HAVE_MPI)
/* comm_device.c. Non-zero when p is device (or managed) memory. */
int loom_comm_on_device(const void *p);
/* *dev = whether the buffers of one operation (b may be NULL) live in device memory; a zero
 * count goes the host way. Fails, naming what and backend, when they are on different sides. */
enum loom_status loom_comm_where(const char *backend, const char *what, const void *a,
                                 const void *b, int64_t count, int *dev);
/* comm_staged.c: "mpi-staged", --comm mpi with --device cuda: MPI, device buffers through host
 * memory; set_stream names the compute stream the copies are ordered with. */
enum loom_status loom_comm_staged_world(struct loom_comm **out, int *argc, char ***argv);
void loom_comm_staged_set_stream(void *stream);
#endif
#ifdef LOOM_HAVE_NCCL
/* comm_nccl.c: the world over NCCL (device buffers) and MPI (host buffers). */
enum loom_status loom_comm_nccl_world(struct loom_comm **out, int *argc, char ***argv);
void loom_comm_nccl_set_stream(void *stream);
#endif

#endif
