/* The LTTng-UST peer of `hotkern bench trace`, in one file: the provider
 * (probes defined here, linked statically, as lttng-ust's manual shows)
 * and the three cases hotkern measures, on the same inputs: event/disabled,
 * four call sites of an event the session did not enable per loop turn,
 * event/enabled, an event the session records, and event/disabled-cold,
 * one call of a disabled site timed alone after streaming through more
 * memory than the last-level cache (hotkern's `sites.rs`: the same stream,
 * the same lfence-rdtsc stamps, ticks that the benchmark turns into ns
 * with its own calibration). The session is set up by the benchmark before
 * this program starts; liblttng-ust's constructor waits until the session
 * daemon has told it which events are enabled. */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "lttng_tp.h"
#include "timing.h"

#include <x86intrin.h>

/* The TSC once every earlier instruction (loads included) completed. */
static inline uint64_t hotkern_stamp(void)
{
    _mm_lfence();
    uint64_t ticks = __rdtsc();
    _mm_lfence();
    return ticks;
}

/* event/disabled's loop, four sites a turn, in a function of its own that
 * starts a cache line, as hotkern's loops (loops.rs) do: where a loop of a
 * few instructions lands decides its speed. `noipa` keeps GCC from
 * cloning it (a clone would not carry the alignment) or inlining it. */
static __attribute__((noinline, noipa, aligned(64))) void
disabled_turns(uint64_t first, uint64_t count)
{
    for (uint64_t i = first; i < first + count; i++) {
        lttng_ust_tracepoint(hotkern_bench, quiet, i, i, (uint32_t)i);
        lttng_ust_tracepoint(hotkern_bench, quiet, i, i + 1, (uint32_t)i);
        lttng_ust_tracepoint(hotkern_bench, quiet, i, i + 2, (uint32_t)i);
        lttng_ust_tracepoint(hotkern_bench, quiet, i, i + 3, (uint32_t)i);
    }
}

/* The site of event/disabled-cold, in a function of its own as hotkern's. */
static __attribute__((noinline)) void cold_site(uint64_t i)
{
    lttng_ust_tracepoint(hotkern_bench, quiet, i, i, (uint32_t)i);
}

/* Reads one word of every cache line of the stream. */
static __attribute__((noinline)) void evict(const uint64_t *words, uint64_t count)
{
    uint64_t sum = 0;
    for (uint64_t j = 0; j < count; j += 8)
        sum += words[j];
    HOTKERN_OPAQUE(sum);
}

int main(int argc, char **argv)
{
    /* lttng_bench DISABLED_TURNS ENABLED_OPS RUNS COLD_CALLS STREAM_BYTES */
    uint64_t turns = hotkern_arg(argc, argv, 1), ops = hotkern_arg(argc, argv, 2);
    uint64_t runs = hotkern_arg(argc, argv, 3), cold_calls = hotkern_arg(argc, argv, 4);
    uint64_t words = hotkern_arg(argc, argv, 5) / 8;
    double disabled, enabled, cold = 1e300;

    /* A figure for an event the session does not record would be a
     * no-op's: say so instead and let the benchmark refuse it. */
    printf("enabled %d %d\n",
           lttng_ust_tracepoint_enabled(hotkern_bench, sample) ? 1 : 0,
           lttng_ust_tracepoint_enabled(hotkern_bench, quiet) ? 1 : 0);

    /* The benchmark refuses a figure from a loop off a line's start. */
    printf("disabled-loop-offset %u\n", (unsigned)((uintptr_t)disabled_turns % 64));
    disabled = hotkern_fastest_turns(turns, runs, disabled_turns);
    printf("event/disabled %.4f\n", disabled / 4);

    HOTKERN_FASTEST(enabled, ops, runs, {
        uint64_t a = i;
        HOTKERN_OPAQUE(a);
        lttng_ust_tracepoint(hotkern_bench, sample, a, i ^ 0x55, (uint32_t)i);
    });
    printf("event/enabled %.4f\n", enabled);

    /* The stream, made and touched before any timing. */
    uint64_t *stream = malloc(words * sizeof *stream);
    if (!stream) {
        perror("malloc");
        return 2;
    }
    for (uint64_t j = 0; j < words; j++)
        stream[j] = j;
    cold_site(0);
    for (uint64_t run = 0; run < runs; run++) {
        uint64_t ticks = 0;
        for (uint64_t i = 0; i < cold_calls; i++) {
            evict(stream, words);
            uint64_t start = hotkern_stamp();
            cold_site(run * cold_calls + i);
            ticks += hotkern_stamp() - start;
        }
        if ((double)ticks / cold_calls < cold)
            cold = (double)ticks / cold_calls;
    }
    free(stream);
    printf("event/disabled-cold-ticks %.4f\n", cold);
    return 0;
}
