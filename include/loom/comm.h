/* One collective interface over process groups, independent of the transport.
 *
 * Backends: "self" (one rank, every collective is a copy or no-op), "mpi" (host memory, Open MPI)
 * and "nccl" (device memory through NCCL, host memory through MPI: see comm_nccl.c). Layers and
 * the trainer only ever see struct loom_comm. Buffers live where the backend expects them (host
 * for self/mpi; device for nccl, which also takes host buffers, e.g. a few loss or norm scalars,
 * and moves those over MPI: both ends of a message must use the same kind of memory).
 * Every call counts the bytes it sends (for the analytic communication-volume checks).
 *
 * Arguments are checked before anything moves: a negative count, a NULL buffer with a non-zero
 * count, a peer or root outside the group or an unsupported dtype/op pair is a recorded error
 * (loom_fail), never a crash. Reductions on BF16, F16 and the FP8 types are LOOM_ERR_UNSUPPORTED on
 * the host backends (convert to F32 first); moving them (gather, broadcast, send...) is fine.
 * An all-reduce gives bit-identical results on every rank of the group.
 */
#ifndef LOOM_COMM_H
#define LOOM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "loom/status.h"
#include "loom/tensor.h"

enum loom_redop { LOOM_REDOP_SUM = 0, LOOM_REDOP_MAX, LOOM_REDOP_MIN };

/* Kinds of collectives, for the volume counters. */
enum loom_coll {
    LOOM_COLL_ALLREDUCE = 0,
    LOOM_COLL_REDUCE_SCATTER,
    LOOM_COLL_ALLGATHER,
    LOOM_COLL_ALLTOALL,
    LOOM_COLL_BROADCAST,
    LOOM_COLL_SENDRECV,
    LOOM_COLL_COUNT
};

struct loom_comm; /* a process group; opaque */
struct loom_comm_req; /* an outstanding non-blocking operation; opaque */

int loom_comm_rank(const struct loom_comm *c);
int loom_comm_size(const struct loom_comm *c);
const char *loom_comm_backend_name(const struct loom_comm *c);

/* The world group. "self" gives a 1-rank world without MPI; "mpi" calls MPI_Init_thread (once,
 * FUNNELED) and installs a loom_abort hook that ends every rank; "nccl" (built with CUDA, MPI
 * and NCCL) first selects the GPU of the local rank (loom_comm_local_rank() modulo the device
 * count), starts MPI as "mpi" does and builds an NCCL communicator over it. "auto" (or NULL)
 * picks "mpi" when the process was started by a launcher (mpirun, srun) and "self" otherwise
 * (the trainer picks "nccl" for --device cuda under a launcher). */
enum loom_status loom_comm_world(struct loom_comm **out, const char *backend, int *argc,
                                 char ***argv);
/* This process's rank among the processes of its node, from the launcher's environment
 * (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID, LOCAL_RANK); 0 when none is set. */
int loom_comm_local_rank(void);
/* Non-zero when a launcher (mpirun, srun) started this process and MPI is built in: what "auto"
 * uses to choose between one rank and MPI. */
int loom_comm_launched(void);
/* Device-memory backends order their operations with the work queued on `stream` (a
 * cudaStream_t; NULL: the legacy default stream): nccl runs them on a stream of its own, after the
 * work already queued there, and makes work queued there afterwards wait for their results (a
 * blocking collective on device buffers returns once it is queued, not once it has finished);
 * mpi-staged copies the buffers on `stream` itself. Process-wide (one device per process); no
 * effect on the host backends. */
void loom_comm_set_stream(void *stream);
/* Non-zero when `c`'s operations are ordered after the work queued on that stream (nccl,
 * mpi-staged): a caller need not wait for the device before handing it a buffer that queued work
 * writes. Zero for the host backends (mpi, self), which read the buffer when called. */
int loom_comm_stream_ordered(const struct loom_comm *c);
/* Non-zero when `c` takes buffers in device memory (nccl, mpi-staged); zero for the backends
 * that move host memory only (mpi, self). */
int loom_comm_device_memory(const struct loom_comm *c);

/* Sub-group of `parent` made of the ranks with the same `color`, ordered by `key` (ties by
 * parent rank). Collective over `parent`. A negative color joins no group: *out is NULL. */
enum loom_status loom_comm_split(struct loom_comm **out, struct loom_comm *parent, int color,
                                 int key);
void loom_comm_free(struct loom_comm *c);
/* Finalise the transport (MPI_Finalize) after every group is freed. */
void loom_comm_finalize(void);

/* End the whole job at once with exit status `code`: MPI_Abort(MPI_COMM_WORLD, code) under MPI,
 * exit(code) otherwise. For a rank that fails alone, so that no other rank is left waiting. */
_Noreturn void loom_comm_abort_job(int code);
/* Print the last recorded error (loom_print_error) and end the job with status `code`.
 * collective != 0 promises that every rank met the same error (e.g. a layout check that all ranks
 * make alike): rank 0 alone prints it, then every rank finalises MPI; rank 0 exits with `code`,
 * the others with 0, so that the launcher reports the job's failure only once rank 0 is done.
 * collective == 0: this rank prints its message and aborts the job (loom_comm_abort_job). */
_Noreturn void loom_comm_exit_error(int code, int collective);

/* The start-up agreement of a job a launcher started: every rank calls it once, before
 * loom_comm_world and whatever it met so far, so that no failure leaves the other ranks waiting
 * and no rank works with a setting the others do not share. `status` is this rank's result so
 * far (an error: loom_fail's message travels to rank 0); `record` (used when status is LOOM_OK)
 * is what must be alike on every rank, as lines "KEY\tVALUE\n" (KEY naming it for the user: a
 * flag). It starts MPI (on this rank's GPU first when `cuda`, as the nccl world would) and
 * returns LOOM_OK when every rank brought LOOM_OK and the same record. Otherwise it returns an
 * error on every rank: on rank 0 the job's message (any rank's error, "[rank 3] ..." when not
 * every rank met it; else "ranks disagree on KEY: V1 on ranks 0-2, V2 on rank 3"), to be ended
 * with loom_comm_exit_error(code, 1). Without a launcher (or MPI) it returns `status`. */
enum loom_status loom_comm_agree(enum loom_status status, const char *record, int cuda,
                                 int *argc, char ***argv);
/* The decision of loom_comm_agree over n ranks' results (failed[r], and texts[r]: the error
 * message or the record): 0 when all agree; else 1 with the message in out[cap]. */
int loom_comm_agree_verdict(int n, const int *failed, const char *const *texts, char *out,
                            size_t cap);

/* Blocking collectives. count is in elements of dt. */
enum loom_status loom_comm_allreduce(struct loom_comm *c, void *buf, int64_t count,
                                     enum loom_dtype dt, enum loom_redop op);
/* recv[count] = reduction of this rank's block of send[count * size]; recv must not be send */
enum loom_status loom_comm_reduce_scatter(struct loom_comm *c, void *recv, const void *send,
                                          int64_t count, enum loom_dtype dt, enum loom_redop op);
/* recv[count * size] = concatenation of every rank's send[count] in rank order; send may be this
 * rank's own block of recv (in place) */
enum loom_status loom_comm_allgather(struct loom_comm *c, void *recv, const void *send,
                                     int64_t count, enum loom_dtype dt);
/* Equal blocks: send[count * size] block r goes to rank r; recv block r came from rank r;
 * send == recv works in place */
enum loom_status loom_comm_alltoall(struct loom_comm *c, void *recv, const void *send,
                                    int64_t count, enum loom_dtype dt);
/* Variable blocks (counts and displacements in elements) */
enum loom_status loom_comm_alltoallv(struct loom_comm *c, void *recv, const int64_t *recv_counts,
                                     const int64_t *recv_displs, const void *send,
                                     const int64_t *send_counts, const int64_t *send_displs,
                                     enum loom_dtype dt);
enum loom_status loom_comm_broadcast(struct loom_comm *c, void *buf, int64_t count,
                                     enum loom_dtype dt, int root);
enum loom_status loom_comm_send(struct loom_comm *c, const void *buf, int64_t count,
                                enum loom_dtype dt, int peer, int tag);
enum loom_status loom_comm_recv(struct loom_comm *c, void *buf, int64_t count, enum loom_dtype dt,
                                int peer, int tag);
enum loom_status loom_comm_barrier(struct loom_comm *c);

/* Non-blocking variants: start, then wait. A request is freed by wait. */
enum loom_status loom_comm_iallreduce(struct loom_comm *c, void *buf, int64_t count,
                                      enum loom_dtype dt, enum loom_redop op,
                                      struct loom_comm_req **req);
/* In place: buf holds count * size elements; when the request completes, block `rank` of it,
 * buf[rank * count, + count), holds the reduction of that block over the group (what the other
 * blocks then hold is unspecified). Counted as reduce_scatter. */
enum loom_status loom_comm_ireduce_scatter(struct loom_comm *c, void *buf, int64_t count,
                                           enum loom_dtype dt, enum loom_redop op,
                                           struct loom_comm_req **req);
/* In place: buf holds count * size elements, this rank's block at buf[rank * count]; when the
 * request completes every block holds its rank's. Counted as allgather. */
enum loom_status loom_comm_iallgather(struct loom_comm *c, void *buf, int64_t count,
                                      enum loom_dtype dt, struct loom_comm_req **req);
enum loom_status loom_comm_isend(struct loom_comm *c, const void *buf, int64_t count,
                                 enum loom_dtype dt, int peer, int tag,
                                 struct loom_comm_req **req);
enum loom_status loom_comm_irecv(struct loom_comm *c, void *buf, int64_t count,
                                 enum loom_dtype dt, int peer, int tag,
                                 struct loom_comm_req **req);
enum loom_status loom_comm_wait(struct loom_comm_req *req);
/* Has the operation completed? When *done is set the request is finished and freed, as by wait;
 * otherwise it stays outstanding. Never blocks. */
enum loom_status loom_comm_test(struct loom_comm_req *req, int *done);

/* Bytes this rank has sent through `c`, by collective kind, since the last reset.
 *
 * The convention is the per-rank volume of the bandwidth-optimal ring algorithms, whatever the
 * transport really does, so that it can be checked against the analytic formulas. With n the
 * group size, e the element size and S = count * e (integer arithmetic, division last):
 *   allreduce (and iallreduce)  2 * (n-1) * S / n       (reduce-scatter + all-gather of S)
 *   reduce_scatter              (n-1) * S               (S = the received block, count * e)
 *   allgather                   (n-1) * S               (S = this rank's block)
 *   alltoall                    (n-1) * S               (S = one block; the own block stays)
 *   alltoallv                   e * sum of send_counts[r] over r != own rank
 *   broadcast                   S on every rank but the last of the chain root, root+1, ...,
 *                               i.e. rank (root-1) mod n counts 0 (a pipelined chain broadcast)
 *   send / isend (SENDRECV)     S to another rank, 0 to itself; recv and irecv count 0
 *   barrier                     0
 * A group of one counts 0 for everything. Failed calls count nothing. */
int64_t loom_comm_bytes(const struct loom_comm *c, enum loom_coll kind);
void loom_comm_reset_counters(struct loom_comm *c);

#endif
