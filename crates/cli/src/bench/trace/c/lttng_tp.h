/* The LTTng-UST tracepoint provider of `hotkern bench trace`: hotkern's
 * bench_sample and bench_quiet events, three integer fields each. */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER hotkern_bench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./lttng_tp.h"

#if !defined(HOTKERN_BENCH_LTTNG_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define HOTKERN_BENCH_LTTNG_TP_H

#include <stdint.h>
#include <lttng/tracepoint.h>

LTTNG_UST_TRACEPOINT_EVENT_CLASS(hotkern_bench, three_integers,
    LTTNG_UST_TP_ARGS(uint64_t, a, uint64_t, b, uint32_t, c),
    LTTNG_UST_TP_FIELDS(
        lttng_ust_field_integer(uint64_t, a, a)
        lttng_ust_field_integer(uint64_t, b, b)
        lttng_ust_field_integer(uint32_t, c, c)
    )
)

LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(hotkern_bench, three_integers, hotkern_bench, sample,
    LTTNG_UST_TP_ARGS(uint64_t, a, uint64_t, b, uint32_t, c))

LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(hotkern_bench, three_integers, hotkern_bench, quiet,
    LTTNG_UST_TP_ARGS(uint64_t, a, uint64_t, b, uint32_t, c))

#endif

#include <lttng/tracepoint-event.h>
