/* 1-bit Adam (Tang et al. 2021, as DeepSpeed's OnebitAdam): Adam whose data-parallel traffic,
 * after a warmup, is the momentum compressed to one bit an element.
 *
 * Warmup (steps 1 .. freeze_step): the gradients are all-reduced (averaged) as usual and
 *   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,  p -= lr (m / (sqrt(v) + eps) + wd p)
 * (DeepSpeed's form: no bias correction, the weight decay added to the update).
 * Compressed (every later step): the gradients are not reduced; each worker forms
 *   m = b1 m + (1 - b1) g_local
 * from its own, v stays frozen, and m becomes the error-compensated compressed average of the
 * workers' momenta (below); the update is the warmup's.
 *
 * The compressed all-reduce of x[n] over W workers (n padded with zeros to a multiple of 8 W,
 * cut into W chunks, chunk j served by worker j):
 *   worker:  x += worker_error; s = ||x|| / sqrt(n); c = s sign(x) (sign(0) = +1);
 *            worker_error = x - c; its signs packed 8 a byte (the first element in the high
 *            bit), chunk j sent to worker j (all-to-all), s to all (all-gather);
 *   server j: y = (1 / W) sum over workers w of s_w sign_w(chunk j) + server_error;
 *            t = ||y|| / sqrt(n / W); server_error = y - t sign(y); its signs packed and
 *            gathered to all with t (all-gather);
 *   result:  x = t_j sign(y_j) over the chunks j, the padding cut off.
 * On the wire per compressed step, per worker: (W - 1) n / (8 W) bytes of signs twice and
 * 2 (W - 1) scales, against 2 (W - 1) 4 n / W for the fp32 all-reduce: about 1/32. */
#ifndef LOOM_ONEBIT_H
#define LOOM_ONEBIT_H

#include <stdint.h>

#include "loom/backend.h"
#include "loom/comm.h"
#include "loom/status.h"

struct loom_onebit {
    struct loom_comm *dp;
    struct loom_backend *be; /* its memory carries the collectives when the comm needs device
                                memory (NCCL); else host arrays do */
    int W, rank;
    int64_t n, npad, chunk; /* floats compressed; padded to 8 W; npad / W */
    float *worker_error;    /* [npad] (host) */
    float *server_error;    /* [chunk] (host) */
    float *x;               /* [npad] scratch */
    uint8_t *signs, *recv;  /* [npad / 8] packed signs sent, received */
    float *scales;          /* [W] */
    void *dev;              /* device staging of the collectives (NULL: host comm) */
};

/* For vectors of n floats over the group dp (be: whose memory a device comm's buffers take). */
enum loom_status loom_onebit_init(struct loom_onebit *ob, struct loom_comm *dp,
                                  struct loom_backend *be, int64_t n);
void loom_onebit_free(struct loom_onebit *ob);
/* Zero both error buffers (a new run, or one resumed from a checkpoint: as DeepSpeed, the errors
 * are not kept). */
void loom_onebit_reset(struct loom_onebit *ob);
/* x[n] (host) replaced by the compressed average of every worker's x; collective over dp. */
enum loom_status loom_onebit_allreduce(struct loom_onebit *ob, float *x);
/* The moments of n elements (host): m = b1 m + (1 - b1) g gs and, unless frozen,
 * v = b2 v + (1 - b2) (g gs)^2. */
void loom_onebit_moments(float *m, float *v, const float *g, int64_t n, double b1, double b2,
                         float gs, int frozen);
/* p -= lr (m / (sqrt(v) + eps) + wd p) on n elements (host). */
void loom_onebit_update(float *p, const float *m, const float *v, int64_t n, float lr, float eps,
                        float wd);

#endif
