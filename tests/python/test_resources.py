"""Reference counting and memory over many calls; blocks on several threads;
the GIL released while the device or the oracle runs."""
import gc
import os
import sys
import threading
import time

import numpy as np

import vkgate
from conftest import assert_close, block_weights, random_x, tiny_block, tiny_config


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_thousand_forwards_flat_resident_memory(rng):
    # Measured without the validation layer, as the C++ soak test does
    # (tests/test_soak.cpp): the layer keeps memory for every command buffer
    # it saw, which would hide what vkgate and this module do.
    ctx = vkgate.Context(device=os.environ.get("VKGATE_TEST_DEVICE") or None)
    cfg = tiny_config()
    block = vkgate.GatedAttention(ctx, cfg, block_weights(cfg, rng))
    # 16 KiB out per forward: a leaked output array would grow the process by 16 MiB.
    x = random_x(rng, 2, 64, 32)
    refs = (sys.getrefcount(x), sys.getrefcount(block), sys.getrefcount(ctx))
    for _ in range(100):
        block.forward(x)
    gc.collect()
    warm = resident_bytes()
    peak = warm
    for i in range(1000):
        y = block.forward(x, stats=(i % 2 == 0))
        if i % 50 == 0:
            peak = max(peak, resident_bytes())
    del y
    gc.collect()
    peak = max(peak, resident_bytes())
    print("resident memory after warm-up %.1f MiB, peak %.1f MiB" % (warm / 2**20, peak / 2**20))
    assert peak <= warm + (4 << 20), "resident memory grew by %.1f MiB" % ((peak - warm) / 2**20)
    assert (sys.getrefcount(x), sys.getrefcount(block), sys.getrefcount(ctx)) == refs
    assert block.recorded_shapes == 2  # with and without statistics


def test_two_threads_each_with_its_own_block(ctx, rng):
    cfg = tiny_config()
    cases = []
    for _ in range(2):
        w = block_weights(cfg, rng)
        x = random_x(rng, 1, 6, 32)
        cases.append((vkgate.GatedAttention(ctx, cfg, w), x, vkgate.reference.forward(cfg, w, x)["output"]))
    results = [[], []]
    errors = []

    def run(i):
        try:
            block, x, _ = cases[i]
            for _ in range(25):
                results[i].append(block.forward(x))
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for (block, x, want), got in zip(cases, results):
        assert len(got) == 25
        assert_close(got[0], want)
        for y in got[1:]:
            np.testing.assert_array_equal(y, got[0])  # bitwise reproducible


def test_one_block_on_two_threads_is_refused_not_corrupted(ctx, rng):
    _, _, block, x, want = tiny_block(ctx, rng, 1, 64)
    outcomes = []

    def run():
        for _ in range(20):
            try:
                outcomes.append(block.forward(x))
            except vkgate.Error as e:
                assert "another thread" in str(e)
                outcomes.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [o for o in outcomes if isinstance(o, np.ndarray)]
    assert len(outcomes) == 40 and done
    for y in done:
        assert_close(y, want)


def test_gil_released_while_computing(ctx, rng):
    cfg = tiny_config(hidden_size=256, num_heads=8, num_kv_heads=4, head_dim=32)
    w = block_weights(cfg, rng)
    x = random_x(rng, 1, 384, 256)
    block = vkgate.GatedAttention(ctx, cfg, w)
    block.forward(x)  # pipelines built and the shape recorded before timing
    for name, call in (("the oracle", lambda: vkgate.reference.forward(cfg, w, x)), ("the device", lambda: block.forward(x))):
        worker = threading.Thread(target=call)
        ticks = 0
        start = time.monotonic()
        worker.start()
        # This thread runs Python only while the worker's C++ call has let go of the GIL.
        while worker.is_alive():
            ticks += 1
        took = time.monotonic() - start
        worker.join()
        print("%s: %.3f s, %d ticks" % (name, took, ticks))
        assert took < 0.05 or ticks > 1000, "%s held the GIL: %d ticks in %.3f s" % (name, ticks, took)
