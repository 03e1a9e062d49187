"""Ctrl-C during a long generation: SIGINT sent to a child process that runs
Model.generate on a tiny random model raises KeyboardInterrupt within a step or
two (not after every token), and the model then generates the same ids as a
fresh one. Run for real, in a child process, since a signal cannot be sent to
the pytest process itself without ending it."""
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import vkgate
from conftest import write_model

# Far more tokens than can run before the signal arrives, on any device (about
# 4 ms a step on llvmpipe: minutes); without the signal checks the interrupt
# waits for all of them.
TOKENS = 30000
# The most seconds from SIGINT to KeyboardInterrupt: one step, or the 50 ms
# between checks, is the design; the rest is room for a loaded machine.
LIMIT_S = 5.0

CHILD = r"""
import os, signal, sys, time
import vkgate

# What a terminal gives Python; a child of a shell without job control may
# have SIGINT ignored, and then Python installs no handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
directory, path, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = vkgate.Context(device=os.environ.get("VKGATE_TEST_DEVICE") or None, validation=True)
model = vkgate.Model.load(ctx, directory)
prompt = [1, 2, 3]
model.generate(prompt, max_new_tokens=4)  # the pipelines compiled before the clock starts


def long_generation():
    if path == "ids":
        return len(model.generate(prompt, max_new_tokens=tokens, stop_at_eos=False))
    n = 0
    for _ in model.generate("Hello, world", max_new_tokens=tokens, stop_at_eos=False):
        n += 1
    return n


print("started", flush=True)
try:
    n = long_generation()
    print("finished", n, flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    again = model.generate(prompt, max_new_tokens=8, stop_at_eos=False)
    fresh = vkgate.Model.load(ctx, directory).generate(prompt, max_new_tokens=8, stop_at_eos=False)
    print("same as a fresh model:", list(again) == list(fresh), list(again), flush=True)
    print("validation messages:", ctx.validation_messages, flush=True)
    raise
"""


def lines_of(stream, q):
    for line in stream:
        q.put((time.monotonic(), line.rstrip("\n")))
    q.put((time.monotonic(), None))


def next_line(q, timeout):
    try:
        return q.get(timeout=timeout)
    except queue.Empty:
        return None, None


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    # a context limit far beyond the generation, whatever the default
    write_model(d, np.random.default_rng(25), max_position_embeddings=1 << 17)
    return str(d)


@pytest.mark.parametrize("path", ["ids", "text"])
def test_ctrl_c_stops_generate(model_dir, path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(vkgate.__file__)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    child = subprocess.Popen([sys.executable, "-c", CHILD, model_dir, path, str(TOKENS)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    q = queue.Queue()
    threading.Thread(target=lines_of, args=(child.stdout, q), daemon=True).start()
    try:
        _, line = next_line(q, 120)
        assert line == "started", "the child did not start: %r\n%s" % (line, child.stderr.read() if line is None else "")
        time.sleep(0.5)  # well inside the generation
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        at, line = next_line(q, LIMIT_S)
        latency = (at or time.monotonic()) - sent
        print("%s: SIGINT to KeyboardInterrupt %.3f s" % (path, latency))
        assert line == "interrupted", "no KeyboardInterrupt %.1f s after SIGINT (got %r)" % (LIMIT_S, line)
        assert latency < LIMIT_S
        out = []
        while True:
            _, line = next_line(q, 120)
            if line is None:
                break
            out.append(line)
        err = child.stderr.read()
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    print("\n".join(out))
    assert any(line.startswith("same as a fresh model: True") for line in out), "\n".join(out) + err
    assert "validation messages: 0" in out, "\n".join(out)
    # the interrupt propagates: the child ends as Python does on an unhandled Ctrl-C
    assert child.returncode == -signal.SIGINT, (child.returncode, err)
    assert "KeyboardInterrupt" in err, err
