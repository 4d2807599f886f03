/* Stream capture across streams, from C with this project's own declarations (no NVIDIA
 * header): a fork and join that records one graph, and the answers to what capture refuses
 * (a fork not joined back, an end on a joined stream, an event from outside the capture or
 * from another capture, the legacy stream joining, waiting on a joined stream).
 *
 * Each step prints "SCENARIO STEP: got CODE" (CODE as cuGetErrorName names it), so the output
 * of NVIDIA's library and ours can be compared line by line (tools/libcuda/hw/hw-check.sh), and
 * checks it against the expected answer written beside it: NVIDIA's library's answers (H100,
 * driver 580.159.04, 2026-12-07).
 *
 * Usage: NVBARE_DEVICE=sim:gh100 ./capture_check KERNELS_SM90.cubin
 * Prints "capture_check: ok" and exits 0, or lists the differing steps and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_api.h"

/* cuda.h's values. */
enum {
    SUCCESS = 0,
    UNSUPPORTED = 900,
    INVALIDATED = 901,
    MERGE = 902,
    UNMATCHED = 903,
    UNJOINED = 904,
    ISOLATION = 905,
    IMPLICIT = 906,
};
enum { MODE_GLOBAL = 0, STREAM_NON_BLOCKING = 1 };
/* CUstreamCaptureStatus, printed as codes of their own. */
enum { STATUS_NONE = 0, STATUS_ACTIVE = 1, STATUS_INVALIDATED = 2 };

static int failures;
static const char *scenario;

static const char *name_of(CUresult r) {
    const char *n = 0;
    if (cuGetErrorName(r, &n) != SUCCESS || !n) return "?";
    return n;
}

/* One step: print what the library answered, count it if it is not the expected answer. */
static void step(const char *what, CUresult got, CUresult want) {
    printf("%s %s: got %s\n", scenario, what, name_of(got));
    if (got != want) {
        printf("  differs: expected %s\n", name_of(want));
        failures++;
    }
}

/* A capture status, as a step of its own. */
static void status(const char *what, CUstream s, int want) {
    int st = -1;
    CUresult r = cuStreamIsCapturing(s, &st);
    printf("%s %s: status %d (%s)\n", scenario, what, st, name_of(r));
    if (r != SUCCESS || st != want) {
        printf("  differs: expected status %d\n", want);
        failures++;
    }
}

#define MUST(call)                                                                          \
    do {                                                                                    \
        CUresult r_ = (call);                                                               \
        if (r_ != SUCCESS) {                                                                \
            fprintf(stderr, "capture_check: %s returned %s (line %d)\n", #call, name_of(r_), \
                    __LINE__);                                                              \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

/* Fresh streams and events for each scenario, so one scenario's answer cannot change the
 * next one's. */
static CUstream s0, s1, s2;
static CUevent e1, e2, e3;

static void begin_scenario(const char *name) {
    scenario = name;
    MUST(cuStreamCreate(&s0, STREAM_NON_BLOCKING));
    MUST(cuStreamCreate(&s1, STREAM_NON_BLOCKING));
    MUST(cuStreamCreate(&s2, STREAM_NON_BLOCKING));
    MUST(cuEventCreate(&e1, 0));
    MUST(cuEventCreate(&e2, 0));
    MUST(cuEventCreate(&e3, 0));
}

/* End whatever capture is left (its answer is not part of the comparison), then free. */
static void end_scenario(void) {
    CUstream all[3] = {s0, s1, s2};
    for (int i = 0; i < 3; i++) {
        int st = STATUS_NONE;
        CUgraph g = 0;
        if (cuStreamIsCapturing(all[i], &st) == SUCCESS && st != STATUS_NONE &&
            cuStreamEndCapture(all[i], &g) == SUCCESS && g)
            cuGraphDestroy(g);
    }
    for (int i = 0; i < 3; i++) MUST(cuStreamSynchronize(all[i]));
    for (int i = 0; i < 3; i++) MUST(cuStreamDestroy_v2(all[i]));
    MUST(cuEventDestroy_v2(e1));
    MUST(cuEventDestroy_v2(e2));
    MUST(cuEventDestroy_v2(e3));
}

/* s0 begins a capture and records e1 in it, the start of most scenarios. */
static void begin_and_record(void) {
    step("begin s0", cuStreamBeginCapture_v2(s0, MODE_GLOBAL), SUCCESS);
    step("record e1 on s0", cuEventRecord(e1, s0), SUCCESS);
}

/* ... and s1 joins it by waiting for e1. */
static void begin_and_fork(void) {
    begin_and_record();
    step("s1 waits e1", cuStreamWaitEvent(s1, e1, 0), SUCCESS);
}

/* Ends the capture on s0, expecting `want`. */
static void end_s0(CUresult want) {
    CUgraph g = 0;
    step("end s0", cuStreamEndCapture(s0, &g), want);
    if (g) cuGraphDestroy(g);
}

static CUfunction add1;
static CUdeviceptr buf;
static unsigned int n = 32;
static void *params[2] = {&buf, &n};

static CUresult launch(CUstream s) {
    return cuLaunchKernel(add1, 1, 1, 1, 32, 1, 1, 0, s, params, 0);
}

static unsigned int first_value(void) {
    unsigned int v = 0;
    MUST(cuMemcpyDtoH_v2(&v, buf, sizeof v));
    return v;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: capture_check KERNELS_SM90.cubin\n");
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUgraph g;
    CUgraphExec ex;
    MUST(cuInit(0));
    MUST(cuDeviceGet(&dev, 0));
    MUST(cuCtxCreate_v2(&ctx, 0, dev));
    void *image = read_file(argv[1]);
    MUST(cuModuleLoadData(&mod, image));
    MUST(cuModuleGetFunction(&add1, mod, "add1"));
    unsigned int zeros[32] = {0};
    MUST(cuMemAlloc_v2(&buf, sizeof zeros));
    MUST(cuMemcpyHtoD_v2(buf, zeros, sizeof zeros));

    /* Fork and join: s1 joins through e1, s0 waits for e2 after s1's work. Event records and
     * waits make no nodes: the graph holds the kernel, the memset and the kernel. */
    begin_scenario("fork-join");
    step("begin s0", cuStreamBeginCapture_v2(s0, MODE_GLOBAL), SUCCESS);
    step("launch s0", launch(s0), SUCCESS);
    step("record e1 on s0", cuEventRecord(e1, s0), SUCCESS);
    step("s1 waits e1", cuStreamWaitEvent(s1, e1, 0), SUCCESS);
    status("s1 after the wait", s1, STATUS_ACTIVE);
    step("memset on s1", cuMemsetD32Async(buf, 5, 32, s1), SUCCESS);
    step("launch s1", launch(s1), SUCCESS);
    step("record e2 on s1", cuEventRecord(e2, s1), SUCCESS);
    step("s0 waits e2", cuStreamWaitEvent(s0, e2, 0), SUCCESS);
    g = 0;
    step("end s0", cuStreamEndCapture(s0, &g), SUCCESS);
    status("s1 after the end", s1, STATUS_NONE);
    if (g) {
        size_t count = 0;
        step("node count", cuGraphGetNodes(g, 0, &count), SUCCESS);
        printf("%s nodes: %zu\n", scenario, count);
        if (count != 3) {
            printf("  differs: expected 3 nodes\n");
            failures++;
        }
        step("instantiate", cuGraphInstantiateWithFlags(&ex, g, 0), SUCCESS);
        step("launch on s2", cuGraphLaunch(ex, s2), SUCCESS);
        step("synchronize s2", cuStreamSynchronize(s2), SUCCESS);
        unsigned int v = first_value();
        printf("%s value: %u\n", scenario, v);
        if (v != 6) {
            printf("  differs: expected 6 (memset 5, then add1)\n");
            failures++;
        }
        cuGraphExecDestroy(ex);
        cuGraphDestroy(g);
    }
    end_scenario();

    /* A fork not joined back: the end fails, gives no graph, and every stream leaves. */
    begin_scenario("unjoined");
    begin_and_fork();
    step("launch s1", launch(s1), SUCCESS);
    g = (CUgraph)0x1234;
    step("end s0", cuStreamEndCapture(s0, &g), UNJOINED);
    printf("%s graph: %s\n", scenario, g ? "set" : "null");
    status("s0 after the end", s0, STATUS_NONE);
    status("s1 after the end", s1, STATUS_NONE);
    end_scenario();

    /* Joined back before the forked stream's last work: still not joined. */
    begin_scenario("joined-early");
    begin_and_fork();
    step("record e2 on s1", cuEventRecord(e2, s1), SUCCESS);
    step("launch s1", launch(s1), SUCCESS);
    step("s0 waits e2", cuStreamWaitEvent(s0, e2, 0), SUCCESS);
    end_s0(UNJOINED);
    end_scenario();

    /* Ended on the stream that joined: not the origin. */
    begin_scenario("end-on-joined");
    begin_and_fork();
    g = 0;
    step("end s1", cuStreamEndCapture(s1, &g), UNMATCHED);
    status("s0 after", s0, STATUS_INVALIDATED);
    end_s0(INVALIDATED);
    end_scenario();

    /* An event recorded outside the capture. */
    begin_scenario("isolation");
    step("record e3 on s2", cuEventRecord(e3, s2), SUCCESS);
    step("begin s0", cuStreamBeginCapture_v2(s0, MODE_GLOBAL), SUCCESS);
    step("s0 waits e3", cuStreamWaitEvent(s0, e3, 0), ISOLATION);
    status("s0 after", s0, STATUS_INVALIDATED);
    end_s0(INVALIDATED);
    end_scenario();

    /* Another capture's event: two captures would merge. */
    begin_scenario("merge");
    step("begin s0", cuStreamBeginCapture_v2(s0, MODE_GLOBAL), SUCCESS);
    step("begin s2", cuStreamBeginCapture_v2(s2, MODE_GLOBAL), SUCCESS);
    step("record e1 on s0", cuEventRecord(e1, s0), SUCCESS);
    step("s2 waits e1", cuStreamWaitEvent(s2, e1, 0), MERGE);
    status("s2 after", s2, STATUS_INVALIDATED);
    status("s0 after", s0, STATUS_INVALIDATED);
    g = 0;
    step("end s2", cuStreamEndCapture(s2, &g), INVALIDATED);
    end_s0(INVALIDATED);
    end_scenario();

    /* Waiting on a stream that joined a capture. */
    begin_scenario("sync-joined");
    begin_and_fork();
    step("synchronize s1", cuStreamSynchronize(s1), UNSUPPORTED);
    status("s0 after", s0, STATUS_INVALIDATED);
    end_s0(INVALIDATED);
    end_scenario();

    /* The legacy default stream joining a capture. */
    begin_scenario("legacy-joins");
    begin_and_record();
    step("legacy waits e1", cuStreamWaitEvent(0, e1, 0), IMPLICIT);
    end_s0(INVALIDATED);
    end_scenario();

    /* Everything works normally afterwards. */
    MUST(cuMemcpyHtoD_v2(buf, zeros, sizeof zeros));
    MUST(launch(0));
    MUST(cuStreamSynchronize(0));
    if (first_value() != 1) {
        printf("after the scenarios: add1 did not run\n");
        failures++;
    }
    MUST(cuMemFree_v2(buf));
    MUST(cuModuleUnload(mod));
    MUST(cuCtxDestroy_v2(ctx));
    free(image);
    if (failures) {
        printf("capture_check: %d step(s) differ\n", failures);
        return 1;
    }
    printf("capture_check: ok\n");
    return 0;
}
