/* Learning-rate and weight-decay schedules (Megatron's OptimizerParamScheduler semantics). */
#include <math.h>
#include <string.h>

#include "loom/optim.h"

/* The styles' names as the flags spell them, in the order of their enums. */
#define NNAMES(a) ((int)(sizeof(a) / sizeof((a)[0])))
static const char *const lr_style_names[] = {"constant", "linear", "cosine", "inverse-square-root",
                                             "WSD"};
static const char *const wsd_style_names[] = {"exponential", "linear", "cosine", "minus_sqrt"};
static const char *const wd_style_names[] = {"constant", "linear", "cosine"};

static const char *name_of(const char *const *names, int n, int v) {
    return v >= 0 && v < n ? names[v] : "?";
}

static int index_of(const char *const *names, int n, const char *name) {
    for (int i = 0; name && i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

const char *loom_lr_style_name(enum loom_lr_decay style) {
    return name_of(lr_style_names, NNAMES(lr_style_names), (int)style);
}
int loom_lr_style_parse(const char *name) {
    return index_of(lr_style_names, NNAMES(lr_style_names), name);
}
const char *loom_wsd_style_name(enum loom_lr_wsd style) {
    return name_of(wsd_style_names, NNAMES(wsd_style_names), (int)style);
}
int loom_wsd_style_parse(const char *name) {
    return index_of(wsd_style_names, NNAMES(wsd_style_names), name);
}
const char *loom_wd_style_name(enum loom_wd_incr style) {
    return name_of(wd_style_names, NNAMES(wd_style_names), (int)style);
}
int loom_wd_style_parse(const char *name) {
    return index_of(wd_style_names, NNAMES(wd_style_names), name);
}

double loom_lr_at(const struct loom_lr_schedule *s, int64_t steps) {
    const double n = (double)steps;
    if (s->warmup_steps > 0 && n <= s->warmup_steps)
        return s->init_lr + (s->max_lr - s->init_lr) * n / s->warmup_steps;
    if (s->style == LOOM_LR_CONSTANT) return s->max_lr;
    if (steps > s->decay_steps) return s->min_lr;
    if (s->style == LOOM_LR_INVERSE_SQRT) {
        const double lr =
            s->max_lr * sqrt(s->warmup_steps > 1 ? s->warmup_steps : 1.0) / sqrt(n > 1 ? n : 1.0);
        return lr > s->min_lr ? lr : s->min_lr;
    }
    double coeff;
    if (s->style == LOOM_LR_WSD) {
        const int64_t start = s->decay_steps - s->wsd_decay_steps;
        if (steps <= start) {
            coeff = 1.0;
        } else {
            const double r = (double)(steps - start) / (double)s->wsd_decay_steps;
            coeff = s->wsd_style == LOOM_WSD_LINEAR       ? 1.0 - r
                    : s->wsd_style == LOOM_WSD_COSINE     ? 0.5 * (cos(M_PI * r) + 1.0)
                    : s->wsd_style == LOOM_WSD_MINUS_SQRT ? 1.0 - sqrt(r)
                                                          : 2.0 * pow(0.5, r) - 1.0;
        }
    } else {
        const double span = (double)s->decay_steps - s->warmup_steps;
        const double ratio = span > 0 ? (n - s->warmup_steps) / span : 1.0;
        coeff = s->style == LOOM_LR_LINEAR ? 1.0 - ratio : 0.5 * (cos(M_PI * ratio) + 1.0);
    }
    return s->min_lr + coeff * (s->max_lr - s->min_lr);
}

double loom_lr_decoupled_at(const struct loom_lr_schedule *s, int64_t steps) {
    if (s->decoupled_max_lr < 0) return loom_lr_at(s, steps);
    struct loom_lr_schedule d = *s;
    d.max_lr = s->decoupled_max_lr;
    d.min_lr = s->decoupled_min_lr;
    return loom_lr_at(&d, steps);
}

double loom_wd_at(const struct loom_wd_schedule *s, int64_t steps) {
    if (steps > s->incr_steps || s->style == LOOM_WD_CONSTANT) return s->end_wd;
    const double r = (double)steps / (double)s->incr_steps;
    const double coeff = s->style == LOOM_WD_LINEAR ? r : 0.5 * (cos(M_PI * (1.0 - r)) + 1.0);
    return s->start_wd + coeff * (s->end_wd - s->start_wd);
}

int64_t loom_batch_at(const struct loom_batch_ramp *r, int64_t consumed) {
    const int64_t n =
        r->start > 0 && r->increment > 0 ? (r->final_batch - r->start) / r->increment : 0;
    if (n <= 0 || consumed > r->samples) return r->final_batch;
    /* in double, as Megatron's Python divides */
    const double per_step = (double)r->samples / (double)n;
    const int64_t k = (int64_t)((double)consumed / per_step);
    const int64_t b = r->start + k * r->increment;
    return b < r->final_batch ? b : r->final_batch;
}

int64_t loom_batch_ramp_iters(const struct loom_batch_ramp *r, int64_t train_samples,
                              int64_t *consumed_end) {
    int64_t iters = 0, consumed = 0;
    if (r->start > 0)
        while (consumed <= r->samples) {
            consumed += loom_batch_at(r, consumed);
            iters++;
        }
    if (consumed > train_samples) {
        *consumed_end = consumed;
        return 0;
    }
    const int64_t rest = (train_samples - consumed) / r->final_batch;
    *consumed_end = consumed + rest * r->final_batch;
    return iters + rest;
}
