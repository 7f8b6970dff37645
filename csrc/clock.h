#ifndef REDLOCK_CLOCK_H
#define REDLOCK_CLOCK_H

/* The one clock of the C side: ms on CLOCK_MONOTONIC, the clock of
 * core.now() (deadlines, validity, renewal times), and CLOCK_REALTIME ms
 * for legacy mode's stored expiries. Thread-safe, no state. */
double redlock_mono_ms(void);
double redlock_wall_ms(void);

/* Sleeps ms, the whole time even when signals interrupt it. */
void redlock_pause_ms(double ms);

#endif
