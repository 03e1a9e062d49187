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
           "max_activation.png", "expert_load.png", "summary.png")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SKIP = 77


def safetensors_bytes(tensors, metadata=None):
    """tensors: {name: (shape, flat list of values[, dtype])} -> bytes of a safetensors
    file; dtype is "F32" (the default) or "I64"."""
    header = {}
    data = bytearray()
    for name, (shape, values, *dtype) in tensors.items():
        dtype = dtype[0] if dtype else "F32"
        n = 1
        for d in shape:
            n *= d
        assert len(values) == n, name
        begin = len(data)
        data += struct.pack(f"<{n}{ {'F32': 'f', 'I64': 'q'}[dtype] }", *values)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, len(data)]}
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


def i64(values):
    return ([len(values)], list(values), "I64")


def hybrid_tensors(layers=8, heads=4, attention=(3, 7), experts=6, k=2):
    """A Qwen3-Next-like run: softmax attention (gated) at `attention` only, every layer
    a sparse MoE of `experts` experts with `k` per token."""
    la = len(attention)
    load = []
    for l in range(layers):
        row = [1.0 + ((l + e) % 3) for e in range(experts)]  # uneven, sums to k
        total = sum(row)
        load += [k * v / total for v in row]
    return {
        "stats.max_activation": ([layers], [5.0 * 1.8 ** l for l in range(layers)]),
        "stats.first_token_attn": ([la, heads], [0.3 + 0.5 * i / la + 0.02 * h
                                                 for i in range(la) for h in range(heads)]),
        "stats.attention_layers": i64(attention),
        "stats.gate_mean": ([la], [0.2 + 0.5 * i / la for i in range(la)]),
        "stats.expert_load": ([layers, experts], load),
        "stats.moe_layers": i64(range(layers)),
        "logits": ([1, 3], [0.5, -0.5, 1.0]),
    }


def gla_tensors(layers=6):
    """A GLA-like run: no softmax attention, no MoE, only max_activation."""
    return {"stats.max_activation": ([layers], [2.0 + l for l in range(layers)]),
            "logits": ([1, 3], [0.5, -0.5, 1.0])}


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

    def test_two_runs_write_every_png(self):
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
                               "stats.max_activation", "stats.gate_mean",
                               "stats.attention_layers", "stats.expert_load",
                               "stats.moe_layers"):
            self.assertIn(text, r.stdout)

    def test_hybrid_moe_run(self):
        hybrid = self.write("hybrid.safetensors", hybrid_tensors(),
                            {"model": "synthetic-8L-hybrid", "precision": "bf16"})
        out = self.out_dir()
        r = self.run_script(hybrid, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_pngs(out, r.stdout)
        # beside a dense run with every layer attention, and the other way round
        for runs in ((self.baseline, hybrid), (hybrid, self.gated)):
            out = self.out_dir("pair." + os.path.basename(runs[0]))
            r = self.run_script(*runs, "--out", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assert_pngs(out, r.stdout)

    def test_many_attention_and_moe_layers(self):
        # more rows than the heat maps label one by one; MoE on the odd layers only
        tensors = hybrid_tensors(layers=48, attention=tuple(range(3, 48, 2)), experts=32, k=4)
        tensors["stats.expert_load"] = ([24, 32], tensors["stats.expert_load"][1][:24 * 32])
        tensors["stats.moe_layers"] = i64(range(1, 48, 2))
        path = self.write("big_hybrid.safetensors", tensors)
        out = self.out_dir()
        r = self.run_script(path, self.baseline, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_pngs(out, r.stdout)

    def test_gla_run_has_only_max_activation(self):
        gla = self.write("gla.safetensors", gla_tensors())
        for runs in ((gla,), (gla, self.gated), (self.gated, gla)):
            out = self.out_dir("out." + "_".join(os.path.basename(p) for p in runs))
            r = self.run_script(*runs, "--out", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assert_pngs(out, r.stdout)  # the empty panels carry notes

    def test_no_run_has_more_than_max_activation(self):
        one = self.write("gla1.safetensors", gla_tensors(4))
        two = self.write("gla2.safetensors", gla_tensors(6))
        out = self.out_dir()
        r = self.run_script(one, two, "--out", out, "--labels", "a,b")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_pngs(out, r.stdout)

    def test_old_style_file_without_attention_layers(self):
        # written before stats.attention_layers: first_token_attn [L, H] covers every layer
        tensors = gated_tensors(layers=5)
        self.assertNotIn("stats.attention_layers", tensors)
        path = self.write("old.safetensors", tensors)
        out = self.out_dir()
        r = self.run_script(path, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_pngs(out, r.stdout)
        # the same with the indices written explicitly
        tensors["stats.attention_layers"] = i64(range(5))
        path = self.write("new.safetensors", tensors)
        r = self.run_script(path, "--out", self.out_dir("new"))
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_missing_first_token_attn_is_allowed(self):
        # a run without softmax attention layers is valid: its panels carry a note
        tensors = baseline_tensors()
        del tensors["stats.first_token_attn"]
        path = self.write("nofirst.safetensors", tensors)
        out = self.out_dir()
        r = self.run_script(path, self.gated, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_pngs(out, r.stdout)

    # ------------------------------------------------------------------ input errors

    def test_missing_file(self):
        missing = os.path.join(self.tmp, "nope.safetensors")
        out = self.out_dir()
        r = self.run_script(missing, "--out", out)
        self.assert_input_error(r, missing)
        self.assert_no_png(out)

    def test_missing_max_activation(self):
        for name, tensors in (("nomax.safetensors", baseline_tensors()),
                              ("nomax_hybrid.safetensors", hybrid_tensors()),
                              ("nomax_gla.safetensors", gla_tensors())):
            del tensors["stats.max_activation"]
            path = self.write(name, tensors)
            out = self.out_dir(name + ".out")
            self.assert_input_error(self.run_script(path, "--out", out),
                                    path, "stats.max_activation", "missing")
            self.assert_no_png(out)

    def check_bad_tensors(self, name, tensors, *needles):
        """`tensors` written to `name` (beside a good run) fails naming it and needles."""
        path = self.write(name, tensors)
        out = self.out_dir(name + ".out")
        r = self.run_script(self.baseline, path, "--out", out)
        self.assert_input_error(r, path, *needles)
        self.assert_no_png(out)

    def test_bad_attention_layers(self):
        name = "stats.attention_layers"
        cases = {
            "short": ([i64([3])], "shape"),                        # 2 rows in first_token_attn
            "long": ([i64([1, 3, 7])], "shape"),
            "matrix": ([([2, 1], [3, 7], "I64")], "shape"),
            "past_end": ([i64([3, 8])], "outside [0, 8)"),          # L is 8
            "negative": ([i64([-1, 3])], "outside [0, 8)"),
            "descending": ([i64([7, 3])], "ascending"),
            "repeated": ([i64([3, 3])], "ascending"),
            "f32": ([([2], [3.0, 7.0])], "dtype"),
        }
        for case, ((value,), needle) in cases.items():
            with self.subTest(case=case):
                tensors = hybrid_tensors()
                tensors[name] = value
                self.check_bad_tensors(f"attn_{case}.safetensors", tensors, name, needle)

    def test_attention_layers_truncated(self):
        tensors = hybrid_tensors()
        last = tensors.pop("stats.attention_layers")  # last in the data section
        del tensors["logits"]
        tensors["stats.attention_layers"] = last
        path = self.write("attn_cut.safetensors", tensors)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 8)
        r = self.run_script(path, "--out", self.out_dir())
        self.assert_input_error(r, path, "stats.attention_layers", "truncated")

    def test_old_style_rows_not_every_layer(self):
        # first_token_attn covers 3 of 4 layers, and no stats.attention_layers says which
        tensors = baseline_tensors()
        tensors["stats.first_token_attn"] = ([3, 3], tensors["stats.first_token_attn"][1][:9])
        self.check_bad_tensors("old_short.safetensors", tensors, "stats.attention_layers",
                               "missing")

    def test_gate_mean_must_match_attention_layers(self):
        tensors = hybrid_tensors()
        tensors["stats.gate_mean"] = ([8], [0.5] * 8)  # L, not L_attn
        self.check_bad_tensors("gate8.safetensors", tensors, "stats.gate_mean", "shape", "[2]")

    def test_expert_load_without_moe_layers(self):
        tensors = hybrid_tensors()
        del tensors["stats.moe_layers"]
        self.check_bad_tensors("nomoe.safetensors", tensors, "stats.moe_layers", "missing")

    def test_expert_load_out_of_range(self):
        for case, value in (("high", 1.5), ("negative", -0.25)):
            with self.subTest(case=case):
                tensors = hybrid_tensors()
                shape, values = tensors["stats.expert_load"]
                values = list(values)
                values[7] = value
                tensors["stats.expert_load"] = (shape, values)
                self.check_bad_tensors(f"load_{case}.safetensors", tensors,
                                       "stats.expert_load", "[0, 1]")

    def test_bad_expert_load_or_moe_layers(self):
        cases = {
            "load_flat": ("stats.expert_load", ([48], [0.25] * 48), "shape"),
            "load_i64": ("stats.expert_load", ([8, 6], [0] * 48, "I64"), "dtype"),
            "load_nan": ("stats.expert_load", ([8, 6], [float("nan")] * 48), "NaN"),
            "moe_short": ("stats.moe_layers", i64(range(7)), "shape"),
            "moe_past_end": ("stats.moe_layers", i64(range(1, 9)), "outside [0, 8)"),
            "moe_descending": ("stats.moe_layers", i64(range(7, -1, -1)), "ascending"),
        }
        for case, (name, value, needle) in cases.items():
            with self.subTest(case=case):
                tensors = hybrid_tensors()
                tensors[name] = value
                self.check_bad_tensors(f"{case}.safetensors", tensors, name, needle)

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
        del tensors["stats.max_activation"]
        bad = self.write("bad.safetensors", tensors)
        out = self.out_dir("fresh")
        r = self.run_script(self.baseline, bad, "--out", out)
        self.assert_input_error(r, bad, "stats.max_activation")
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
