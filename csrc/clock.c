/* The monotonic clock and the pause every C file uses (csrc/clock.h). */
#define _GNU_SOURCE
#include "clock.h"

#include <errno.h>
#include <time.h>

static double clock_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double redlock_mono_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

double redlock_wall_ms(void) { return clock_ms(CLOCK_REALTIME); }

void redlock_pause_ms(double ms) {
    struct timespec req, rem;
    if (!(ms > 0))
        return;
    req.tv_sec = (time_t)(ms / 1000);
    req.tv_nsec = (long)((ms - (double)req.tv_sec * 1000) * 1e6);
    while (nanosleep(&req, &rem) != 0 && errno == EINTR)
        req = rem;
}
