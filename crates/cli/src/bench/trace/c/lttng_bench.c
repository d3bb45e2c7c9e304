/* The LTTng-UST peer of `hotkern bench trace`, in one file: the provider
 * (probes defined here, linked statically, as lttng-ust's manual shows)
 * and the two cases hotkern measures, on the same inputs: event/disabled,
 * four call sites of an event the session did not enable per loop turn,
 * and event/enabled, an event the session records. The session is set up
 * by the benchmark before this program starts; liblttng-ust's constructor
 * waits until the session daemon has told it which events are enabled. */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "lttng_tp.h"
#include "timing.h"

int main(int argc, char **argv)
{
    /* lttng_bench DISABLED_TURNS ENABLED_OPS RUNS */
    uint64_t turns = hotkern_arg(argc, argv, 1), ops = hotkern_arg(argc, argv, 2);
    uint64_t runs = hotkern_arg(argc, argv, 3);
    double disabled, enabled;

    /* A figure for an event the session does not record would be a
     * no-op's: say so instead and let the benchmark refuse it. */
    printf("enabled %d %d\n",
           lttng_ust_tracepoint_enabled(hotkern_bench, sample) ? 1 : 0,
           lttng_ust_tracepoint_enabled(hotkern_bench, quiet) ? 1 : 0);

    HOTKERN_FASTEST(disabled, turns, runs, {
        lttng_ust_tracepoint(hotkern_bench, quiet, i, i, (uint32_t)i);
        lttng_ust_tracepoint(hotkern_bench, quiet, i, i + 1, (uint32_t)i);
        lttng_ust_tracepoint(hotkern_bench, quiet, i, i + 2, (uint32_t)i);
        lttng_ust_tracepoint(hotkern_bench, quiet, i, i + 3, (uint32_t)i);
    });
    printf("event/disabled %.4f\n", disabled / 4);

    HOTKERN_FASTEST(enabled, ops, runs, {
        uint64_t a = i;
        HOTKERN_OPAQUE(a);
        lttng_ust_tracepoint(hotkern_bench, sample, a, i ^ 0x55, (uint32_t)i);
    });
    printf("event/enabled %.4f\n", enabled);
    return 0;
}
