#!/usr/bin/env python3
"""vkgate's logits of GGUF files against llama.cpp's own (CPU backend), same ids.

  tools/peer/compare_logits.py --llama LLAMA_CPP_DIR [--vkgate BUILD/tools/vkgate] FILE.gguf...

LLAMA_CPP_DIR is a llama.cpp source tree built outside the repository with its
libraries in build/bin (tools/build_peer.sh, or the CPU build of
tests/data/gguf/llama_cpp/README.md). Compiles llama_logits.c against it, runs
`vkgate run` (fp32) and llama.cpp on the same random ids, and prints per file
the NMSE and max abs error of vkgate's logits against llama.cpp's and how many
positions have the same argmax. llama.cpp's CPU products quantize the
activations for block formats (Q8_K, Q8_0), so its logits differ from an fp32
run by its own error: read a file's figure beside the others'. Not a test:
nothing of it runs in CI.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def write_ids(path, ids):
    data = struct.pack("<%dq" % len(ids), *ids)
    header = json.dumps({"input_ids": {"dtype": "I64", "shape": [1, len(ids)], "data_offsets": [0, len(data)]}})
    header = header.encode() + b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)


def read_logits(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    t = json.loads(raw[8:8 + n])["logits"]
    start, end = t["data_offsets"]
    values = struct.unpack("<%df" % ((end - start) // 4), raw[8 + n + start:8 + n + end])
    vocab = t["shape"][-1]
    return [list(values[i:i + vocab]) for i in range(0, len(values), vocab)]


def vocab_size(vkgate, gguf, tmp):
    # One id through vkgate gives the logits' width without a GGUF parser here.
    write_ids(os.path.join(tmp, "one.safetensors"), [0])
    run_vkgate(vkgate, gguf, os.path.join(tmp, "one.safetensors"), os.path.join(tmp, "one_out.safetensors"))
    return len(read_logits(os.path.join(tmp, "one_out.safetensors"))[0])


def run_vkgate(vkgate, gguf, ids_path, out_path):
    subprocess.run([vkgate, "run", "--weights", gguf, "--input", ids_path, "--output", out_path, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", required=True, help="llama.cpp source tree with build/bin")
    ap.add_argument("--vkgate", default=os.path.join(HERE, "..", "..", "build", "tools", "vkgate"))
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    lib = os.path.join(a.llama, "build", "bin")
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "llama_logits")
        subprocess.run(["cc", "-O1", os.path.join(HERE, "llama_logits.c"), "-I" + os.path.join(a.llama, "include"),
                        "-I" + os.path.join(a.llama, "ggml", "include"), "-L" + lib, "-lllama", "-lggml",
                        "-lggml-base", "-Wl,-rpath," + lib, "-o", exe], check=True)
        rng = random.Random(a.seed)
        for gguf in a.files:
            vocab = vocab_size(a.vkgate, gguf, tmp)
            ids = [rng.randrange(vocab) for _ in range(a.tokens)]
            write_ids(os.path.join(tmp, "ids.safetensors"), ids)
            run_vkgate(a.vkgate, gguf, os.path.join(tmp, "ids.safetensors"), os.path.join(tmp, "out.safetensors"))
            ours = read_logits(os.path.join(tmp, "out.safetensors"))
            out = subprocess.run([exe, gguf] + [str(i) for i in ids], capture_output=True, text=True,
                                 check=True).stdout
            peer = [[float(x) for x in line.split()] for line in out.strip().split("\n")]
            err = sum((x - y) ** 2 for o, p in zip(ours, peer) for x, y in zip(o, p))
            norm = sum(y * y for p in peer for y in p)
            worst = max(abs(x - y) for o, p in zip(ours, peer) for x, y in zip(o, p))
            same = sum(o.index(max(o)) == p.index(max(p)) for o, p in zip(ours, peer))
            print("%s: %d ids, NMSE %.3g, max abs %.3g, argmax equal %d/%d" %
                  (os.path.basename(gguf), len(ids), err / norm, worst, same, len(ids)))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
