"""tinygrad's CUDA backend (DEV=CUDA), unmodified, on nvbare's libcuda.so.1.

Run by sim.sh with LD_LIBRARY_PATH at our library and NVBARE_DEVICE naming N simulated GPUs
(argument N, default 1; with two, the copy between them too).
The simulator runs only the fixture kernels, so this exercises what needs no kernel of
tinygrad's own: device open and count, allocation, host-to-device and device-to-host copies
of several dtypes and sizes, buffers at an offset, the LRU allocator's reuse, and the copy
between two devices (cuMemcpyDtoDAsync, an event recorded on one context and waited on by the
other's null stream).
"""
import struct, sys
from tinygrad import Tensor, Device, dtypes

failures = 0
def check(what, ok):
  global failures
  print(f"{'ok  ' if ok else 'FAIL'} {what}")
  if not ok: failures += 1

dev = Device["CUDA"]
want = int(sys.argv[1]) if len(sys.argv) > 1 else 1
check(f"CUDA opened: arch {dev.arch}, {dev.count()} device(s)", dev.arch == "sm_90" and dev.count() == want)

for dt, vals in [(dtypes.uint8, [0, 1, 127, 255]), (dtypes.int32, [-(2**31), -1, 0, 2**31 - 1]),
                 (dtypes.float32, [0.5, -1.25, 2.0**127, 2.0**-126]),
                 (dtypes.int64, [-(2**63), 2**62, 7, 0])]:
  got = Tensor(vals, dtype=dt, device="CUDA").realize().tolist()
  check(f"{dt} round trip", got == vals)

# 4 MiB: larger than one staging chunk, so copies are split.
n = 1 << 20
data = list(range(n))
t = Tensor(data, dtype=dtypes.uint32, device="CUDA").realize()
check("4 MiB uint32 round trip", t.tolist() == data)

# A view at an offset: its buffer is a CUdeviceptr inside another allocation.
base = Tensor(list(range(64)), dtype=dtypes.int32, device="CUDA").realize()
check("buffer at an offset", base.uop.buffer.view(16, dtypes.int32, 16 * 4).ensure_allocated().as_memoryview().cast("i").tolist() == list(range(16, 32)))

# Freed buffers come back from the LRU allocator; their contents are overwritten by the copy.
for i in range(3):
  vals = [i * 1000 + j for j in range(256)]
  check(f"reallocated buffer {i}", Tensor(vals, dtype=dtypes.int32, device="CUDA").realize().tolist() == vals)

# CUDA -> CUDA:1: tinygrad's _transfer (DtoD across contexts, event, cuStreamWaitEvent).
if want > 1:
  src = Tensor([3.5, -7.0, 11.0, 0.25], device="CUDA").realize()
  moved = src.to("CUDA:1").realize()
  check(f"copy to CUDA:1 (device {moved.device})", moved.tolist() == [3.5, -7.0, 11.0, 0.25])
  back = moved.to("CUDA").realize()
  check("and back to CUDA", back.tolist() == [3.5, -7.0, 11.0, 0.25])

for i in range(want): Device[f"CUDA:{i}" if i else "CUDA"].synchronize()
print(f"tinygrad on nvbare libcuda: {'all passed' if failures == 0 else f'{failures} FAILED'}")
sys.exit(1 if failures else 0)
