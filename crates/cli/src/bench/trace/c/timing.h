/* The timing of hotkern's benchmarks (crates/cli/src/bench/measure.rs,
 * fastest_ns_per_op) for the C peers of `hotkern bench trace`: a warm-up of
 * up to 10 000 calls outside the timing, then `ops` calls split into `runs`
 * equal runs of which the fastest counts, in the calling thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID). The body is pasted into the loop, as the Rust
 * closure is inlined there, so no indirect call is charged to the peer. */
#ifndef HOTKERN_BENCH_TIMING_H
#define HOTKERN_BENCH_TIMING_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Keeps the compiler from folding `x` into the loop: Rust's black_box. */
#define HOTKERN_OPAQUE(x) __asm__ volatile("" : "+r"(x))

static inline double hotkern_thread_ns(void)
{
    struct timespec now;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) != 0) {
        perror("clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        exit(2);
    }
    return (double)now.tv_sec * 1e9 + (double)now.tv_nsec;
}

/* Sets `best` to the fastest run's ns per call of BODY, which sees `i`. */
#define HOTKERN_FASTEST(best, ops, runs, BODY)                                \
    do {                                                                      \
        uint64_t hk_ops_ = (ops), hk_runs_ = (runs) ? (runs) : 1;             \
        uint64_t hk_per_ = hk_ops_ / hk_runs_ ? hk_ops_ / hk_runs_ : 1;       \
        uint64_t i;                                                           \
        for (i = 0; i < (hk_ops_ < 10000 ? hk_ops_ : 10000); i++) {          \
            BODY;                                                             \
        }                                                                     \
        (best) = 1e300;                                                       \
        for (uint64_t hk_run_ = 0; hk_run_ < hk_runs_; hk_run_++) {           \
            double hk_start_ = hotkern_thread_ns();                           \
            for (i = hk_run_ * hk_per_; i < (hk_run_ + 1) * hk_per_; i++) {   \
                BODY;                                                         \
            }                                                                 \
            double hk_ns_ = (hotkern_thread_ns() - hk_start_) / hk_per_;      \
            if (hk_ns_ < (best))                                              \
                (best) = hk_ns_;                                              \
        }                                                                     \
    } while (0)

/* The fastest run's ns per loop turn of RUN_TURNS(first, count), a loop
 * in a function of its own (as hotkern's `four_a_turn!` loops): `turns`
 * turns split into `runs` equal runs, after a warm-up outside the timing. */
static inline double hotkern_fastest_turns(uint64_t turns, uint64_t runs,
                                           void (*run_turns)(uint64_t, uint64_t))
{
    uint64_t per = turns / (runs ? runs : 1);
    double best = 1e300;
    if (per == 0)
        per = 1;
    run_turns(0, turns < 10000 ? turns : 10000);
    for (uint64_t run = 0; run < (runs ? runs : 1); run++) {
        double start = hotkern_thread_ns();
        run_turns(run * per, per);
        double ns = (hotkern_thread_ns() - start) / per;
        if (ns < best)
            best = ns;
    }
    return best;
}

/* The count argument number `n` of the command line (counts are chosen by
 * the Rust side, which knows the run's scale). */
static inline uint64_t hotkern_arg(int argc, char **argv, int n)
{
    if (n >= argc) {
        fprintf(stderr, "%s: argument %d missing\n", argv[0], n);
        exit(2);
    }
    return strtoull(argv[n], NULL, 10);
}

#endif
