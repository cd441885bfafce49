/* How a multi-rank job ends on failure (run by test_comm_abort.sh under mpirun):
 *   assert   the last rank trips a LOOM_ASSERT while the others wait for a message from it that
 *            never comes: loom_abort must end every rank (MPI_Abort through the hook).
 *   alone    rank 1 meets a user error alone and calls loom_comm_exit_error(3, 0) while the
 *            others sit in a barrier: the job must end at once with status 3.
 *   layout   every rank asks for tp 3 x pp 2 on a world that 6 does not divide: the message is
 *            printed once (by rank 0) and every rank exits 1 after finalising.
 *   ok       control: nothing fails, status 0. */
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/log.h"
#include "loom/parallel.h"

int main(int argc, char **argv) {
    struct loom_comm *w;
    if (loom_comm_world(&w, "mpi", &argc, &argv) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    const char *mode = argc > 1 ? argv[1] : "ok";
    int r = loom_comm_rank(w), n = loom_comm_size(w);
    if (strcmp(mode, "assert") == 0) {
        if (r == n - 1) LOOM_ASSERT(r < 0 && "deliberate failure");
        float x;
        loom_comm_recv(w, &x, 1, LOOM_DTYPE_F32, n - 1, 1); /* never sent */
        return 0;
    }
    if (strcmp(mode, "alone") == 0) {
        if (r == 1) {
            loom_fail(LOOM_ERR_INVALID_ARG, "--data-path /nonexistent: no such file");
            loom_comm_exit_error(3, 0);
        }
        loom_comm_barrier(w); /* never completes: rank 1 is gone */
        return 0;
    }
    if (strcmp(mode, "layout") == 0) {
        struct loom_parallel p;
        if (loom_parallel_init(&p, w, 3, 1, 1, 2, 1, 0) != LOOM_OK) {
            loom_comm_free(w);
            loom_comm_exit_error(1, 1);
        }
        loom_parallel_free(&p);
    }
    loom_comm_barrier(w);
    loom_comm_free(w);
    loom_comm_finalize();
    return 0;
}
