/* The uftrace peer of `hotkern bench trace`: hotkern's traced_call, one
 * instrumented call per loop turn. Built twice with the same -O2, once
 * with -pg (every function calls mcount, which `uftrace record` hooks to
 * write the entry record and to plant the return hook that writes the
 * exit record) and once without, so that traced minus untraced is what
 * uftrace adds to a call. */
#include "timing.h"

__attribute__((noinline)) uint64_t traced_call(uint64_t x)
{
    uint64_t y = x * 3;
    HOTKERN_OPAQUE(y);
    return y;
}

int main(int argc, char **argv)
{
    /* uftrace_bench OPS RUNS */
    uint64_t ops = hotkern_arg(argc, argv, 1), runs = hotkern_arg(argc, argv, 2);
    double pair;

    HOTKERN_FASTEST(pair, ops, runs, {
        uint64_t x = i;
        HOTKERN_OPAQUE(x);
        x = traced_call(x);
        HOTKERN_OPAQUE(x);
    });
    printf("function_graph/pair %.4f\n", pair);
    return 0;
}
