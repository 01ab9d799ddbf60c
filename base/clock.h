/*
 * clock.h: the one clock precgate times its work with (part of base/, the
 * foundation every folder may use).
 */
#ifndef PG_CLOCK_H
#define PG_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds on CLOCK_MONOTONIC (an arbitrary origin: only differences mean
 * anything; never steps with the wall clock), to the nanosecond. */
double pg_clock_mono_s(void);

#ifdef __cplusplus
}
#endif

#endif /* PG_CLOCK_H */
