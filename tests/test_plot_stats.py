#!/usr/bin/env python3
"""Tests for tools/plot_stats.py (run: python3 tests/test_plot_stats.py).

Builds small synthetic `vkgate run --stats` files with a tiny safetensors writer
(standard library only), runs the script as a subprocess with this interpreter
and checks the PNGs, stdout, and the errors for malformed input and bad usage.

Exits 0 on success, 1 on failure, and 77 (skip) when this interpreter lacks
numpy or matplotlib (Debian 12: apt-get install python3-numpy python3-matplotlib).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "tools", "plot_stats.py")
OUTPUTS = ("first_token_attn.png", "first_token_heatmap.png", "gate_mean.png",
           "max_activation.png", "summary.png")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SKIP = 77


def safetensors_bytes(tensors, metadata=None):
    """tensors: {name: (shape, flat list of floats)} -> bytes of an F32 safetensors file."""
    header = {}
    data = bytearray()
    for name, (shape, values) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        assert len(values) == n, name
        begin = len(data)
        data += struct.pack(f"<{n}f", *values)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [begin, len(data)]}
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # pad the header to 8 bytes, as the reference writer does
    return struct.pack("<Q", len(text)) + text + bytes(data)


def stats_tensors(layers, heads, first, gate=None, growth=3.0, logits=True):
    """A whole-model stats file: first-token share `first(l, h)`, optional gate_mean."""
    tensors = {
        "stats.first_token_attn": ([layers, heads],
                                   [first(l, h) for l in range(layers) for h in range(heads)]),
        "stats.max_activation": ([layers], [10.0 * growth ** l for l in range(layers)]),
    }
    if gate is not None:
        tensors["stats.gate_mean"] = ([layers], [gate(l) for l in range(layers)])
    if logits:
        tensors["logits"] = ([1, 5], [0.1, -0.2, 0.3, 0.0, 1.5])
    return tensors


def baseline_tensors(layers=4, heads=3):
    return stats_tensors(layers, heads, lambda l, h: 0.2 + 0.1 * l + 0.05 * h)


def gated_tensors(layers=4, heads=3):
    return stats_tensors(layers, heads, lambda l, h: 0.02 + 0.01 * l + 0.01 * h,
                         gate=lambda l: 0.1 + 0.05 * l, growth=1.5)


class PlotStatsTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="plot_stats_test.")
        self.tmp = self._tmp.name
        self.addCleanup(self._tmp.cleanup)
        self.baseline = self.write("baseline.safetensors", baseline_tensors(),
                                   {"model": "synthetic-4L", "precision": "fp32"})
        self.gated = self.write("gated.safetensors", gated_tensors(),
                                {"model": "synthetic-4L-gated", "precision": "bf16"})

    def write(self, name, tensors, metadata=None):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(safetensors_bytes(tensors, metadata))
        return path

    def run_script(self, *args):
        env = dict(os.environ, MPLBACKEND="Agg",
                   MPLCONFIGDIR=os.path.join(self.tmp, "mplconfig"))
        env.pop("DISPLAY", None)
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True,
                              text=True, env=env, timeout=300)

    def out_dir(self, name="out"):
        return os.path.join(self.tmp, name)

    def assert_pngs(self, out, stdout):
        for name in OUTPUTS:
            path = os.path.join(out, name)
            self.assertTrue(os.path.isfile(path), f"{name} was not written")
            with open(path, "rb") as f:
                data = f.read()
            self.assertEqual(data[:8], PNG_SIGNATURE, f"{name} is not a PNG")
            self.assertGreater(len(data), 5000, f"{name} is suspiciously small")
            self.assertIn(path, stdout, f"stdout does not name {name}")
        self.assertEqual(len(stdout.strip().splitlines()), len(OUTPUTS), stdout)
        leftovers = [f for f in os.listdir(out) if f not in OUTPUTS]
        self.assertEqual(leftovers, [], "temporary files left behind")

    def assert_input_error(self, result, *needles):
        self.assertEqual(result.returncode, 1, result.stderr)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, f"expected one line on stderr, got:\n{result.stderr}")
        for needle in needles:
            self.assertIn(needle, lines[0])
        self.assertEqual(result.stdout, "")

    def assert_no_png(self, out):
        if os.path.isdir(out):
            self.assertEqual(os.listdir(out), [], "a failed run left files behind")

    # ------------------------------------------------------------------ success

    def test_two_runs_write_five_pngs(self):
        out = self.out_dir("nested/out")  # created, parents included
        r = self.run_script(self.baseline, self.gated, "--out", out,
                            "--labels", "baseline,gated", "--title", "Synthetic 4-layer model")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_pngs(out, r.stdout)

    def test_single_run_without_gate_and_default_labels(self):
        out = self.out_dir()
        r = self.run_script(self.baseline, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_pngs(out, r.stdout)  # gate_mean.png still written, with a note

    def test_rerun_overwrites(self):
        out = self.out_dir()
        for _ in range(2):
            r = self.run_script(self.gated, self.baseline, "--out", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assert_pngs(out, r.stdout)

    def test_different_layer_counts_are_allowed(self):
        other = self.write("gated6.safetensors", gated_tensors(layers=6, heads=2))
        out = self.out_dir()
        r = self.run_script(self.baseline, other, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_pngs(out, r.stdout)

    def test_help_documents_outputs(self):
        r = self.run_script("--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        for text in OUTPUTS + ("--out", "--labels", "--title", "stats.first_token_attn",
                               "stats.max_activation", "stats.gate_mean"):
            self.assertIn(text, r.stdout)

    # ------------------------------------------------------------------ input errors

    def test_missing_file(self):
        missing = os.path.join(self.tmp, "nope.safetensors")
        out = self.out_dir()
        r = self.run_script(missing, "--out", out)
        self.assert_input_error(r, missing)
        self.assert_no_png(out)

    def test_missing_first_token_attn(self):
        tensors = gated_tensors()
        del tensors["stats.first_token_attn"]
        path = self.write("nofirst.safetensors", tensors)
        out = self.out_dir()
        r = self.run_script(path, "--out", out)
        self.assert_input_error(r, path, "stats.first_token_attn")
        self.assert_no_png(out)

    def test_missing_max_activation(self):
        tensors = baseline_tensors()
        del tensors["stats.max_activation"]
        path = self.write("nomax.safetensors", tensors)
        self.assert_input_error(self.run_script(path, "--out", self.out_dir()),
                                path, "stats.max_activation")

    def test_truncated_header(self):
        with open(self.gated, "rb") as f:
            data = f.read()
        for size, name in ((5, "short.safetensors"), (40, "cut_header.safetensors")):
            path = os.path.join(self.tmp, name)
            with open(path, "wb") as f:
                f.write(data[:size])
            out = self.out_dir(name + ".out")
            r = self.run_script(path, "--out", out)
            self.assert_input_error(r, path, "truncated")
            self.assert_no_png(out)

    def test_truncated_data(self):
        # header intact, the data section cut short: the last stats tensor is incomplete
        tensors = baseline_tensors()
        del tensors["logits"]
        path = self.write("cut_data.safetensors", tensors)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 4)
        r = self.run_script(path, "--out", self.out_dir())
        self.assert_input_error(r, path, "truncated")

    def test_wrong_shape(self):
        tensors = baseline_tensors()
        tensors["stats.first_token_attn"] = ([12], tensors["stats.first_token_attn"][1])
        path = self.write("flat.safetensors", tensors)
        r = self.run_script(path, "--out", self.out_dir())
        self.assert_input_error(r, path, "stats.first_token_attn", "shape")

        tensors = gated_tensors()
        tensors["stats.gate_mean"] = ([3], [0.1, 0.2, 0.3])  # L is 4
        path = self.write("gate3.safetensors", tensors)
        r = self.run_script(path, "--out", self.out_dir())
        self.assert_input_error(r, path, "stats.gate_mean", "shape")

    def test_not_json_header(self):
        path = os.path.join(self.tmp, "garbage.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", 8) + b"{not js!")
        r = self.run_script(path, "--out", self.out_dir())
        self.assert_input_error(r, path, "JSON")

    def test_failure_leaves_no_png(self):
        # first run good, second bad: nothing may be written for either
        tensors = gated_tensors()
        del tensors["stats.first_token_attn"]
        bad = self.write("bad.safetensors", tensors)
        out = self.out_dir("fresh")
        r = self.run_script(self.baseline, bad, "--out", out)
        self.assert_input_error(r, bad, "stats.first_token_attn")
        self.assert_no_png(out)

    # ------------------------------------------------------------------ usage errors

    def test_no_arguments(self):
        r = self.run_script()
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage", r.stderr.lower())

    def test_usage_errors(self):
        out = self.out_dir()
        for args in ((self.baseline,),  # no --out
                     (self.baseline, self.gated, self.gated, "--out", out),  # three runs
                     (self.baseline, self.gated, "--out", out, "--labels", "only-one")):
            r = self.run_script(*args)
            self.assertEqual(r.returncode, 2, f"{args}: {r.stderr}")
            self.assertIn("usage", r.stderr.lower())
            self.assert_no_png(out)


def main():
    if not os.path.isfile(SCRIPT):
        print(f"test_plot_stats: {SCRIPT} not found", file=sys.stderr)
        return 1
    try:
        import numpy  # noqa: F401
        import matplotlib  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {sys.executable} lacks {e.name} "
              "(apt-get install python3-numpy python3-matplotlib)", file=sys.stderr)
        return SKIP
    program = unittest.main(exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
