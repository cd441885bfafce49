/* Dynamic loss scaling (see loom/optim.h). */
#include "loom/optim.h"

void loom_loss_scaler_init(struct loom_loss_scaler *s, double initial, double min_scale,
                           int64_t window, int64_t hysteresis) {
    s->scale = initial;
    s->min_scale = min_scale;
    s->window = window;
    s->hysteresis = hysteresis;
    s->growth_tracker = 0;
    s->hysteresis_tracker = hysteresis;
}

int loom_loss_scaler_update(struct loom_loss_scaler *s, int found_inf) {
    if (s->window <= 0) return found_inf; /* static scale */
    if (found_inf) {
        s->growth_tracker = 0;
        if (--s->hysteresis_tracker <= 0) {
            double next = s->scale * 0.5;
            s->scale = next < s->min_scale ? s->min_scale : next;
        }
        return 1;
    }
    if (++s->growth_tracker == s->window) {
        s->growth_tracker = 0;
        s->hysteresis_tracker = s->hysteresis;
        s->scale *= 2.0;
    }
    return 0;
}
