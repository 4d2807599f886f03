// Host-side helpers shared by the CUDA baselines (cuda_baseline.cu, cuda_p2p.cu and
// tools/libcuda/hw/graph_gap.c): a monotonic clock and strict parsing of numeric options.
// Plain C that also compiles as C++, no CUDA.
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// Seconds on CLOCK_MONOTONIC (what nvbare's benchmarks time with).
static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// The whole of `s` as a number (decimal, 0x hex or 0 octal) that is at least `min`; otherwise
// "<prog>: <flag> needs a number >= <min>, got <s>" on stderr and exit status 2.
static long parse_long(const char *prog, const char *s, const char *flag, long min) {
    char *end = NULL;
    long v = strtol(s, &end, 0);
    if (!s[0] || *end || v < min) {
        fprintf(stderr, "%s: %s needs a number >= %ld, got %s\n", prog, flag, min, s);
        exit(2);
    }
    return v;
}
