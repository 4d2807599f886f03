#!/usr/bin/env python3
"""tinygrad's own speed on whichever libcuda.so.1 the process loads (DEV=CUDA): a TinyJit'd
training step of a small MLP (tinygrad replays it through its CUDA graph), and a TinyJit'd
one-kernel step (a 1-element add: tinygrad's cost per kernel launch). Prints one JSON object.

usage: DEV=CUDA python3 tinygrad_speed.py [STEPS]
"""
import json
import sys
import time

from tinygrad import Context, Device, Tensor, TinyJit, nn


def timed(fn, steps, sync_each):
    dev = Device[Device.DEFAULT]
    for _ in range(5):  # the JIT captures on the second call; later ones replay
        fn()
    dev.synchronize()
    t, calls = [], []
    start = time.perf_counter()
    for _ in range(steps):
        s = time.perf_counter()
        fn()
        c = time.perf_counter()
        if sync_each:
            dev.synchronize()
        t.append(time.perf_counter() - s)
        calls.append(c - s)
    dev.synchronize()
    total = time.perf_counter() - start
    t.sort()
    calls.sort()
    # call_median_us: the step's Python call alone (the graph launch is its last part); in a
    # synchronized step the rest is the GPU's work and the wait.
    return {"per_step_us": total / steps * 1e6, "median_us": t[len(t) // 2] * 1e6,
            "call_median_us": calls[len(calls) // 2] * 1e6, "steps": steps}


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 500

    class Net:
        def __init__(self):
            self.l1, self.l2, self.l3 = nn.Linear(512, 512), nn.Linear(512, 512), nn.Linear(512, 10)

        def __call__(self, x):
            return self.l3(self.l2(self.l1(x).relu()).relu())

    net = Net()
    opt = nn.optim.SGD(nn.state.get_parameters(net), lr=0.01)
    x, y = Tensor.randn(64, 512).realize(), Tensor.randint(64, high=10).realize()

    @TinyJit
    def train_step():
        with Context(TRAINING=1):
            opt.zero_grad()
            loss = net(x).sparse_categorical_crossentropy(y)
            loss.backward()
            opt.step()
        return loss.realize()

    a = Tensor.zeros(1).contiguous().realize()

    @TinyJit
    def one_kernel():
        a.assign(a + 1).realize()

    out = {"device": Device.DEFAULT}
    out["train_step_sync"] = timed(train_step, steps, True)
    out["train_step_queued"] = timed(train_step, steps, False)
    out["one_kernel_sync"] = timed(one_kernel, steps * 4, True)
    out["one_kernel_queued"] = timed(one_kernel, steps * 4, False)
    out["loss"] = float(train_step().item())
    out["counter"] = float(a.item())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
