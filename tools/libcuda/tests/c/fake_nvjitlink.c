/* A stand-in for NVIDIA's libnvJitLink.so, for testing the PTX path without a CUDA toolkit:
 * the entry points under their versioned names (as nvJitLink.h maps them), "compiling" any PTX
 * that does not contain "syntax error" into the cubin named by $FAKE_NVJITLINK_CUBIN, and
 * refusing any target but the one in $FAKE_NVJITLINK_ARCH. Our own code, not NVIDIA's. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char log[256];
    unsigned char *cubin;
    size_t size;
    int ok;
} Link;

int __nvJitLinkCreate_12_4(Link **h, uint32_t n, const char **opts) {
    Link *l = calloc(1, sizeof *l);
    if (!l) return 1;
    const char *want = getenv("FAKE_NVJITLINK_ARCH");
    if (n != 1 || !want || strcmp(opts[0], want) != 0) {
        snprintf(l->log, sizeof l->log, "fake nvJitLink: options %s, wanted %s",
                 n ? opts[0] : "(none)", want ? want : "?");
        l->ok = -1;
    }
    *h = l;
    return 0;
}

int __nvJitLinkAddData_12_4(Link *l, int kind, const void *data, size_t size, const char *name) {
    (void)name;
    if (l->ok < 0) return 3;
    if (kind != 2 /* NVJITLINK_INPUT_PTX */) {
        snprintf(l->log, sizeof l->log, "fake nvJitLink: input kind %d", kind);
        return 3;
    }
    if (memmem(data, size, "syntax error", 12)) {
        snprintf(l->log, sizeof l->log, "ptxas fatal: syntax error in the input");
        return 4;
    }
    l->ok = 1;
    return 0;
}

int __nvJitLinkComplete_12_4(Link *l) {
    if (l->ok != 1) return 4;
    FILE *f = fopen(getenv("FAKE_NVJITLINK_CUBIN"), "rb");
    if (!f) return 5;
    fseek(f, 0, SEEK_END);
    l->size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    l->cubin = malloc(l->size);
    size_t got = l->cubin ? fread(l->cubin, 1, l->size, f) : 0;
    fclose(f);
    return got == l->size ? 0 : 5;
}

int __nvJitLinkGetLinkedCubinSize_12_4(Link *l, size_t *n) {
    *n = l->size;
    return 0;
}

int __nvJitLinkGetLinkedCubin_12_4(Link *l, void *out) {
    memcpy(out, l->cubin, l->size);
    return 0;
}

int __nvJitLinkGetErrorLogSize_12_4(Link *l, size_t *n) {
    *n = strlen(l->log) + 1;
    return 0;
}

int __nvJitLinkGetErrorLog_12_4(Link *l, char *out) {
    strcpy(out, l->log);
    return 0;
}

int __nvJitLinkDestroy_12_4(Link **h) {
    free((*h)->cubin);
    free(*h);
    *h = 0;
    return 0;
}
