/* Dynamic loss scaling follows the documented rules: halve after `hysteresis` overflowing steps
 * (counted since the last growth), never below the minimum; double after `window` clean steps in
 * a row; an overflow resets the clean-step count; every overflowing step is skipped. Expected
 * values are worked out by hand from those rules. */
#include <stdio.h>

#include "loom/optim.h"

static int passes, fails;
#define CHECK(cond, what)                                                                     \
    do {                                                                                      \
        if (cond) passes++;                                                                   \
        else {                                                                                \
            fails++;                                                                          \
            printf("FAIL: %s\n", what);                                                       \
        }                                                                                     \
    } while (0)

int main(void) {
    struct loom_loss_scaler s;
    loom_loss_scaler_init(&s, 65536.0, 1.0, 3, 2);
    CHECK(loom_loss_scaler_update(&s, 1) == 1 && s.scale == 65536.0, "first overflow: skip, keep scale (hysteresis 2)");
    CHECK(loom_loss_scaler_update(&s, 1) == 1 && s.scale == 32768.0, "second overflow: halve");
    CHECK(loom_loss_scaler_update(&s, 1) == 1 && s.scale == 16384.0, "hysteresis spent: halve again");
    CHECK(loom_loss_scaler_update(&s, 0) == 0 && s.scale == 16384.0, "clean 1");
    CHECK(loom_loss_scaler_update(&s, 0) == 0 && s.scale == 16384.0, "clean 2");
    CHECK(loom_loss_scaler_update(&s, 0) == 0 && s.scale == 32768.0, "clean 3: window reached, double");
    CHECK(s.hysteresis_tracker == 2, "growth restores the hysteresis");
    CHECK(loom_loss_scaler_update(&s, 0) == 0 && loom_loss_scaler_update(&s, 1) == 1 &&
              s.scale == 32768.0, "overflow after growth: first one tolerated");
    CHECK(loom_loss_scaler_update(&s, 0) == 0 && loom_loss_scaler_update(&s, 0) == 0 &&
              s.scale == 32768.0, "the overflow reset the clean count");
    CHECK(loom_loss_scaler_update(&s, 0) == 0 && s.scale == 65536.0, "third clean step doubles");
    loom_loss_scaler_init(&s, 4.0, 2.0, 10, 1);
    for (int i = 0; i < 5; i++) loom_loss_scaler_update(&s, 1);
    CHECK(s.scale == 2.0, "never below the minimum");
    loom_loss_scaler_init(&s, 128.0, 1.0, 0, 2);
    CHECK(loom_loss_scaler_update(&s, 1) == 1 && s.scale == 128.0, "static scale skips but never changes");
    CHECK(loom_loss_scaler_update(&s, 0) == 0 && s.scale == 128.0, "static scale stays");
    printf("%d passed, %d failed\n", passes, fails);
    return fails != 0;
}
