/* 1-bit Adam as the trainer's optimizer step (src/optim/onebit_adam.c). */
#ifndef LOOM_OPTIM_ONEBIT_ADAM_H
#define LOOM_OPTIM_ONEBIT_ADAM_H

#include "loom/optim.h"

enum loom_status loom_onebit_adam_step(struct loom_adamw *o, struct loom_model *model, double lr,
                                       double lr_decoupled, double grad_scale);
void loom_onebit_adam_free(struct loom_adamw *o);

#endif
