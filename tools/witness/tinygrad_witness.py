"""The tinygrad witness: unmodified tinygrad drives a GPU served over its remote PCI protocol.

Run by tools/witness/tinygrad.sh with REMOTE=HOST:PORT and DEV=PCI+NV. Opens tinygrad's NV
device (its own GSP boot, RPCs, page tables, channels), copies buffers of several sizes to the
GPU and back through its copy queue and checks every byte, finalizes the device (tinygrad's
UNLOADING_GUEST_DRIVER). The script runs it twice, in two processes: tinygrad keeps a lock file
per device open for its process's life, so a second open has to come from a new process, as
when a user runs a program again; that one finds WPR2 up and resets the GPU first.
"""
import importlib.metadata, random, sys, time

import tinygrad
from tinygrad import Device, Tensor, dtypes

SIZES = [1, 4096 + 3, 64 << 10, (1 << 20) + 7, 5 << 20]


def step(msg):
    print(f"witness: {msg}", flush=True)


def copies(dev):
    rng = random.Random(0x5eed)
    for n in SIZES:
        data = bytes(rng.getrandbits(8) for _ in range(n)) if n < (64 << 10) else rng.randbytes(n)
        t = Tensor(data, dtype=dtypes.uint8, device=dev).realize()
        back = bytes(t.data())
        if back != data:
            bad = next(i for i, (a, b) in enumerate(zip(back, data)) if a != b) if len(back) == len(data) else -1
            sys.exit(f"witness: FAIL: {n} bytes came back different (first difference at byte {bad})")
        step(f"{n} bytes to {dev} and back: identical")


def main():
    step(f"tinygrad {importlib.metadata.version('tinygrad')} from {tinygrad.__file__}")
    t0 = time.time()
    d = Device["NV"]
    step(f"opened NV ({d.arch}) in {time.time() - t0:.1f} s")
    copies("NV")
    d.finalize()
    # tinygrad finalizes every opened device again at exit; this one is done.
    Device._opened_devices.discard("NV")
    step("finalized")
    step("PASS")


if __name__ == "__main__":
    main()
