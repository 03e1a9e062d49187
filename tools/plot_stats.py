#!/usr/bin/env python3
"""Plot the per-layer statistics of `vkgate run --stats` on a whole model.

This is the plotting path for the per-layer analysis of Qiu et al., "Gated
Attention for Large Language Models" (2025): Figure 2 (left) compares the share
of attention that falls on the first token in each layer, baseline vs gated
(46.7% vs 4.8% in the paper).

Input: one or two safetensors files written by `vkgate run --stats` on a whole
model of L layers. They hold these tensors; only stats.max_activation is required:

  stats.max_activation    F32 [L]         max |value| of the residual stream after each layer
  stats.first_token_attn  F32 [L_attn, H] attention probability on key 0, per attention
                                          layer and head (absent without softmax attention,
                                          e.g. a GLA model)
  stats.attention_layers  I64 [L_attn]    the layer indices of those rows, strictly ascending
                                          in [0, L): every layer of a qwen3 or llama model,
                                          the full-attention layers of a hybrid (Qwen3-Next)
  stats.gate_mean         F32 [L_attn]    mean gate score per attention layer (gated models
                                          only)
  stats.expert_load       F32 [L_moe, E]  per sparse MoE layer, the share of the tokens
                                          routed to each expert, in [0, 1] (a row sums to
                                          the experts per token); MoE models only
  stats.moe_layers        I64 [L_moe]     the layer indices of those rows, strictly ascending
                                          in [0, L); required with stats.expert_load

A file written before stats.attention_layers existed (stats.first_token_attn
[L, H] covering every layer) is read as attention layers 0..L-1. Every other
tensor (e.g. `logits`) is ignored and never read. The optional `__metadata__`
strings "model" and "precision" are shown in a footnote. Two runs with different
layer counts are allowed; the titles then say so.

Output, written into --out DIR (created if needed), one line per file on stdout:

  first_token_attn.png     mean over heads of the attention on the first token at each
                           attention layer (plotted at its layer index), one line per run,
                           in percent; the legend gives each run's mean over its attention
                           layers (Figure 2, left panel)
  first_token_heatmap.png  attention layer x head heat map of the same, one panel per run,
                           shared colour scale 0..1 with a colour bar
  gate_mean.png            mean gate score per attention layer for each run that has a gate
  max_activation.png       max |activation| of the residual stream per layer, log y
  expert_load.png          MoE layer x expert heat map of the share of tokens routed to
                           each expert, one panel per run, shared colour scale with a
                           colour bar
  summary.png              the first four panels in one figure, and the expert load
                           below them when a run has an MoE

Every file is written even when a run lacks a statistic: a run without attention
layers, gate or MoE is named in a note on the panels it cannot fill.

Each PNG is written to a temporary file in DIR and renamed into place, so a
failure never leaves a partial PNG; all inputs are validated before anything is
written. Malformed input (missing file, truncated header or data, missing
stats.max_activation, stats.expert_load without stats.moe_layers, wrong dtype or
shape, non-finite values, shares or probabilities outside [0, 1], layer indices
out of range or not ascending) is reported as one line on stderr naming the file
and the tensor or key, with exit status 1. Bad usage exits with status 2.

Reads safetensors with the standard library and numpy only; plots with
matplotlib's Agg backend (no display needed). Debian 12:
  apt-get install --no-install-recommends python3-numpy python3-matplotlib
"""
import argparse
import json
import math
import os
import struct
import sys
import tempfile

PROG = "plot_stats"
OUTPUTS = ("first_token_attn.png", "first_token_heatmap.png", "gate_mean.png",
           "max_activation.png", "expert_load.png", "summary.png")
FIRST_TOKEN = "stats.first_token_attn"
ATTN_LAYERS = "stats.attention_layers"
MAX_ACT = "stats.max_activation"
GATE_MEAN = "stats.gate_mean"
EXPERT_LOAD = "stats.expert_load"
MOE_LAYERS = "stats.moe_layers"
DTYPES = {"F32": ("<f4", 4), "I64": ("<i8", 8)}  # safetensors dtype: numpy dtype, bytes
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the limit of the reference implementation
UMASK = os.umask(0o022)
os.umask(UMASK)
PROB_TOLERANCE = 1e-3  # fp rounding of a probability (or sigmoid) slightly outside [0, 1]
FEW_ROWS = 16  # a heat map with at most this many rows labels every row with its layer


class InputError(Exception):
    """A malformed input file; the message starts with the file name."""


def fail(message, status=1):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(status)


try:
    import numpy as np
except ImportError:  # pragma: no cover - depends on the host
    fail("numpy is missing (Debian 12: apt-get install python3-numpy)")


# --------------------------------------------------------------------------- input

class SafetensorsHeader:
    """The validated header of one safetensors file; tensors are read on demand."""

    def __init__(self, path):
        self.path = path
        try:
            self.file_size = os.path.getsize(path)
            with open(path, "rb") as f:
                prefix = f.read(8)
                if len(prefix) < 8:
                    self.error(f"truncated header: file is {len(prefix)} bytes, "
                               "too short for the 8-byte header length")
                (n,) = struct.unpack("<Q", prefix)
                if n > self.file_size - 8:
                    self.error(f"truncated header: header length {n} exceeds the "
                               f"{self.file_size - 8} bytes after it")
                if n > MAX_HEADER_BYTES:
                    self.error(f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
                raw = f.read(n)
                if len(raw) < n:
                    self.error("truncated header: file ended inside the JSON header")
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory, not a safetensors file") from None
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            self.error(f"header is not valid JSON ({e})")
        if not isinstance(header, dict):
            self.error("header is not a JSON object")
        self.data_start = 8 + n
        self.data_size = self.file_size - self.data_start
        self.entries = {k: v for k, v in header.items() if k != "__metadata__"}
        self.metadata = {}
        if "__metadata__" in header:
            meta = header["__metadata__"]
            if not isinstance(meta, dict):
                self.error("__metadata__ is not a JSON object")
            for key, value in meta.items():
                if not isinstance(value, str):
                    self.error(f"__metadata__ key '{key}' is not a string")
            self.metadata = meta

    def error(self, message):
        raise InputError(f"{self.path}: {message}")

    def tensor_error(self, name, message):
        self.error(f"tensor '{name}': {message}")

    def has(self, name):
        return name in self.entries

    def read(self, name, expected_dtype):
        """Returns tensor `name` of dtype `expected_dtype` ("F32" or "I64") as a numpy
        array of its little-endian type, after checking its entry."""
        if name not in self.entries:
            self.tensor_error(name, "missing (was the file written by `vkgate run --stats` "
                                    "on a whole model?)")
        entry = self.entries[name]
        if not isinstance(entry, dict):
            self.tensor_error(name, "entry is not a JSON object")
        dtype = entry.get("dtype")
        if dtype != expected_dtype:
            self.tensor_error(name, f"dtype is {json.dumps(dtype)}, expected \"{expected_dtype}\"")
        np_dtype, itemsize = DTYPES[expected_dtype]
        shape = entry.get("shape")
        if (not isinstance(shape, list)
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                           for d in shape)):
            self.tensor_error(name, "'shape' is missing or not an array of non-negative integers")
        offsets = entry.get("data_offsets")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0
                           for o in offsets)):
            self.tensor_error(name, "'data_offsets' is missing or not two non-negative integers")
        begin, end = offsets
        numel = math.prod(shape)
        if end < begin:
            self.tensor_error(name, f"data_offsets [{begin}, {end}] end before they begin")
        if end - begin != numel * itemsize:
            self.tensor_error(name, f"data_offsets [{begin}, {end}] hold {end - begin} bytes, "
                                    f"shape {shape} of {expected_dtype} needs {numel * itemsize}")
        if end > self.data_size:
            self.tensor_error(name, f"truncated data: data_offsets end at {end} but the data "
                                    f"section has {self.data_size} bytes")
        try:
            with open(self.path, "rb") as f:
                f.seek(self.data_start + begin)
                raw = f.read(end - begin)
        except OSError as e:
            self.tensor_error(name, f"cannot read: {e.strerror or e}")
        if len(raw) != end - begin:
            self.tensor_error(name, "truncated data: file ended inside the tensor")
        return np.frombuffer(raw, dtype=np_dtype).reshape(shape)

    def read_f32(self, name):
        """Returns F32 tensor `name` as a float64 numpy array, after checking its entry."""
        values = self.read(name, "F32").astype(np.float64)
        if not np.all(np.isfinite(values)):
            self.tensor_error(name, "holds NaN or Inf")
        return values

    def read_i64(self, name):
        """Returns I64 tensor `name` as an int64 numpy array, after checking its entry."""
        return self.read(name, "I64").astype(np.int64)


class Run:
    """The statistics of one whole-model run."""

    def __init__(self, path, label):
        self.path = path
        self.label = label
        st = SafetensorsHeader(path)
        self.metadata = st.metadata

        # L, the model's layer count, comes from the one statistic every run has.
        self.max_act = st.read_f32(MAX_ACT)
        if self.max_act.ndim != 1 or self.max_act.size == 0:
            st.tensor_error(MAX_ACT, f"shape {list(self.max_act.shape)}, expected [L] with L >= 1")
        self.layers = self.max_act.shape[0]
        if np.any(self.max_act < 0):
            st.tensor_error(MAX_ACT, "holds negative values (it is a max of |value|)")

        # The attention statistics: only the layers with softmax attention, if any.
        self.first_token = None
        self.heads = 0
        if st.has(FIRST_TOKEN):
            self.first_token = st.read_f32(FIRST_TOKEN)
            if self.first_token.ndim != 2 or 0 in self.first_token.shape:
                st.tensor_error(FIRST_TOKEN, f"shape {list(self.first_token.shape)}, "
                                             "expected [L_attn, H] with L_attn, H >= 1")
            self.heads = self.first_token.shape[1]
            check_range(st, FIRST_TOKEN, self.first_token, "attention probabilities")
        attn_layers = None
        if st.has(ATTN_LAYERS):
            rows = None if self.first_token is None else self.first_token.shape[0]
            attn_layers = read_layer_indices(st, ATTN_LAYERS, rows, FIRST_TOKEN, self.layers)
        self.gate_mean = None
        if st.has(GATE_MEAN):
            self.gate_mean = st.read_f32(GATE_MEAN)
            if self.gate_mean.ndim != 1:
                st.tensor_error(GATE_MEAN, f"shape {list(self.gate_mean.shape)}, "
                                           "expected [L_attn]")
            check_range(st, GATE_MEAN, self.gate_mean, "gate scores")
        if attn_layers is None:
            described = [(n, t.shape[0]) for n, t in ((FIRST_TOKEN, self.first_token),
                                                      (GATE_MEAN, self.gate_mean))
                         if t is not None]
            if not described:
                attn_layers = np.zeros(0, dtype=np.int64)
            elif described[0][1] == self.layers:
                # written before stats.attention_layers existed: every layer is attention
                attn_layers = np.arange(self.layers, dtype=np.int64)
            else:
                name, rows = described[0]
                st.tensor_error(ATTN_LAYERS, f"missing, and {name} has {rows} rows for the "
                                             f"{self.layers} layers of {MAX_ACT}: which "
                                             "layers they describe is unknown")
        self.attention_layers = attn_layers
        if self.gate_mean is not None and self.gate_mean.shape != (len(attn_layers),):
            source = FIRST_TOKEN if self.first_token is not None else ATTN_LAYERS
            st.tensor_error(GATE_MEAN, f"shape {list(self.gate_mean.shape)}, expected "
                                       f"[{len(attn_layers)}] (L_attn of {source})")
        if self.first_token is not None:
            self.per_layer = self.first_token.mean(axis=1)  # mean over heads, 0..1
            self.overall = float(self.per_layer.mean())      # mean over attention layers

        # The sparse mixture-of-experts layers, if any.
        self.expert_load = None
        self.moe_layers = np.zeros(0, dtype=np.int64)
        if st.has(EXPERT_LOAD):
            self.expert_load = st.read_f32(EXPERT_LOAD)
            if self.expert_load.ndim != 2 or 0 in self.expert_load.shape:
                st.tensor_error(EXPERT_LOAD, f"shape {list(self.expert_load.shape)}, "
                                             "expected [L_moe, E] with L_moe, E >= 1")
            check_range(st, EXPERT_LOAD, self.expert_load, "shares of the tokens")
            if not st.has(MOE_LAYERS):
                st.tensor_error(MOE_LAYERS, f"missing: {EXPERT_LOAD} needs it to name "
                                            "the layers of its rows")
        if st.has(MOE_LAYERS):
            rows = None if self.expert_load is None else self.expert_load.shape[0]
            self.moe_layers = read_layer_indices(st, MOE_LAYERS, rows, EXPERT_LOAD, self.layers)

    @property
    def all_attention(self):
        """Whether every layer has softmax attention (the rows are the layers)."""
        return len(self.attention_layers) == self.layers

    @property
    def experts(self):
        return 0 if self.expert_load is None else self.expert_load.shape[1]

    @property
    def experts_per_token(self):
        """k: the mean row sum of the expert load (every row sums to k)."""
        return float(self.expert_load.sum(axis=1).mean())

    def describe(self):
        parts = [self.metadata[k] for k in ("model", "precision") if self.metadata.get(k)]
        return f"{self.label}: {', '.join(parts)}" if parts else None


def check_range(st, name, values, what):
    if np.any(values < -PROB_TOLERANCE) or np.any(values > 1 + PROB_TOLERANCE):
        st.tensor_error(name, f"values in [{values.min():.6g}, {values.max():.6g}], "
                              f"{what} must lie in [0, 1]")


def read_layer_indices(st, name, rows, rows_of, layers):
    """Reads I64 layer indices `name`: [rows] (the rows of tensor `rows_of`; any length
    when rows is None), strictly ascending within [0, layers)."""
    indices = st.read_i64(name)
    if indices.ndim != 1 or (rows is not None and indices.shape[0] != rows):
        expected = "[n]" if rows is None else f"[{rows}] (the rows of {rows_of})"
        st.tensor_error(name, f"shape {list(indices.shape)}, expected {expected}")
    outside = indices[(indices < 0) | (indices >= layers)]
    if outside.size:
        st.tensor_error(name, f"layer index {int(outside[0])} is outside [0, {layers}) "
                              f"(the {layers} layers of {MAX_ACT})")
    steps = np.flatnonzero(np.diff(indices) <= 0)
    if steps.size:
        i = int(steps[0])
        st.tensor_error(name, f"layer indices are not strictly ascending "
                              f"({int(indices[i + 1])} after {int(indices[i])})")
    return indices


# --------------------------------------------------------------------------- plots

def import_matplotlib():
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.figure import Figure
        from matplotlib import ticker
    except ImportError:
        fail("matplotlib is missing (Debian 12: apt-get install python3-matplotlib)")
    return Figure, ticker


def layer_axis(ax, ticker, runs):
    ax.set_xlabel("Layer")
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_xlim(-0.5, max(r.layers for r in runs) - 0.5)
    ax.grid(True, alpha=0.3)


def markers(points):
    return {"marker": "o", "markersize": 3.5} if points <= 48 else {}


def note(ax, text):
    """A grey note in the middle of an empty panel."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes,
            fontsize="medium", color="0.35", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def corner_note(ax, text):
    ax.text(0.02, 0.96, text, ha="left", va="top", transform=ax.transAxes,
            fontsize="small", color="0.35",
            bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.8"})


def without(runs, what):
    return ", ".join(r.label for r in runs if not what(r))


def has_attention(run):
    return run.first_token is not None


def has_gate(run):
    return run.gate_mean is not None


def has_moe(run):
    return run.expert_load is not None


def hybrid_note(runs, shown):
    """Says which layers the points are when some run's attention layers are not all."""
    partial = [f"{r.label} {len(r.attention_layers)} of {r.layers}"
               for r in runs if shown(r) and not r.all_attention]
    return ("Attention layers only: " + ", ".join(partial)) if partial else None


def panel_first_token(ax, ticker, runs, colors):
    ax.set_title("Attention on the first token per layer")
    shown = [(r, c) for r, c in zip(runs, colors) if has_attention(r)]
    if not shown:
        note(ax, "No run has softmax attention layers\n(no stats.first_token_attn in "
                 + without(runs, has_attention) + ")")
        return
    for run, c in shown:
        ax.plot(run.attention_layers, 100 * run.per_layer, color=c, linewidth=1.8,
                label=f"{run.label} (mean {100 * run.overall:.1f}%)",
                **markers(len(run.attention_layers)))
    layer_axis(ax, ticker, runs)
    top = max(100 * float(r.per_layer.max()) for r, _ in shown)
    ax.set_ylim(0, min(100, max(5.0, top * 1.15)))
    ax.yaxis.set_major_formatter(ticker.PercentFormatter(decimals=0))
    ax.set_ylabel("Attention on first token\n(mean over heads)")
    ax.legend(loc="upper right", fontsize="small")
    notes = [n for n in (hybrid_note(runs, has_attention),
                         len(shown) < len(runs)
                         and "No attention layers: " + without(runs, has_attention)) if n]
    if notes:
        corner_note(ax, "\n".join(notes))


def panel_gate_mean(ax, ticker, runs, colors):
    gated = [(r, c) for r, c in zip(runs, colors) if has_gate(r)]
    ungated = without(runs, has_gate)
    ax.set_title("Mean gate score per layer")
    if not gated:
        note(ax, "No run has a gate\n(no stats.gate_mean in " + ungated + ")")
        return
    for run, c in gated:
        ax.plot(run.attention_layers, run.gate_mean, color=c, linewidth=1.8,
                label=f"{run.label} (mean {run.gate_mean.mean():.3f})",
                **markers(len(run.attention_layers)))
    layer_axis(ax, ticker, runs)
    top = max(float(r.gate_mean.max()) for r, _ in gated)
    ax.set_ylim(0, min(1.0, max(0.05, top * 1.15)))
    ax.set_ylabel("Mean gate score")
    ax.legend(loc="upper right", fontsize="small")
    notes = [n for n in (hybrid_note(runs, has_gate),
                         len(gated) < len(runs) and "No gate: " + ungated) if n]
    if notes:
        corner_note(ax, "\n".join(notes))


def fmt_peak(v):
    return f"{v:,.0f}" if 100 <= v < 1e6 else f"{v:.3g}"


def panel_max_activation(ax, ticker, runs, colors):
    for run, c in zip(runs, colors):
        ax.plot(range(run.layers), run.max_act, color=c, linewidth=1.8,
                label=f"{run.label} (peak {fmt_peak(run.max_act.max())})",
                **markers(run.layers))
    ax.set_yscale("log", nonpositive="mask")
    layer_axis(ax, ticker, runs)
    ax.set_ylabel("Max |activation| (log scale)")
    ax.set_title("Max activation of the residual stream per layer")
    ax.legend(loc="best", fontsize="small")


def label_rows(ax, ticker, layers):
    """Labels a heat map's rows (0..n-1) with the layer index each one is."""
    n = len(layers)
    if n <= FEW_ROWS:
        ax.set_yticks(range(n))
        ax.set_yticklabels([str(int(v)) for v in layers])
        return

    def layer_of(pos, _):
        row = int(round(pos))
        return str(int(layers[row])) if abs(pos - row) < 1e-6 and 0 <= row < n else ""
    ax.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(layer_of))


def panel_row_heatmaps(fig, spec, ticker, runs, matrix, rows, missing, style):
    """Draws one heat map per run side by side in `spec` (a SubplotSpec), with a shared
    colour scale and colour bar. matrix(run) -> 2-D array or None, rows(run) -> the layer
    index of each row; a run without a matrix gets a panel with the note missing(run)."""
    from matplotlib.gridspec import GridSpecFromSubplotSpec
    n = len(runs)
    grid = GridSpecFromSubplotSpec(1, n + 1, subplot_spec=spec,
                                   width_ratios=[1] * n + [0.06])
    image = None
    axes = []
    first = None  # the first panel with an image, whose rows later panels may share
    for i, run in enumerate(runs):
        values = matrix(run)
        share = (first is not None and values is not None
                 and np.array_equal(rows(first[1]), rows(run)))
        ax = fig.add_subplot(grid[0, i], sharey=first[0] if share else None)
        axes.append(ax)
        if values is None:
            ax.set_title(run.label, fontsize="medium")
            note(ax, missing(run))
            continue
        image = ax.imshow(values, vmin=style["vmin"], vmax=style["vmax"], cmap=style["cmap"],
                          aspect="auto", interpolation="nearest", origin="upper")
        ax.set_title(style["title"](run), fontsize="medium")
        ax.set_xlabel(style["xlabel"])
        if values.shape[1] <= FEW_ROWS:
            ax.set_xticks(range(values.shape[1]))
        else:
            ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=5, integer=True))
        if share:
            ax.tick_params(labelleft=False)
        else:
            label_rows(ax, ticker, rows(run))
            ax.set_ylabel(style["ylabel"](run))
        if first is None:
            first = (ax, run)
    if image is not None:
        cax = fig.add_subplot(grid[0, n])
        fig.colorbar(image, cax=cax, label=style["bar"])
    return axes


def panel_heatmaps(fig, spec, ticker, runs):
    """The layer x head heat maps of the attention on the first token."""
    style = {
        "vmin": 0.0, "vmax": 1.0, "cmap": "viridis", "xlabel": "Head",
        "bar": "Attention on first token",
        "title": lambda r: f"{r.label}\n(mean {100 * r.overall:.1f}%)",
        "ylabel": lambda r: ("Layer" if r.all_attention
                             else f"Attention layer ({len(r.attention_layers)} of {r.layers})"),
    }
    return panel_row_heatmaps(
        fig, spec, ticker, runs, lambda r: r.first_token, lambda r: r.attention_layers,
        lambda r: "No softmax attention layers\n(no stats.first_token_attn)", style)


def panel_expert_load(fig, spec, ticker, runs):
    """The MoE layer x expert heat maps of the share of tokens routed to each expert."""
    if not any(has_moe(r) for r in runs):
        ax = fig.add_subplot(spec)
        ax.set_title("Share of tokens routed to each expert")
        note(ax, "No run has a sparse mixture of experts\n(no stats.expert_load in "
                 + without(runs, has_moe) + ")")
        return [ax]
    top = max(float(r.expert_load.max()) for r in runs if has_moe(r))
    style = {
        "vmin": 0.0, "vmax": min(1.0, max(top, 1e-3)), "cmap": "magma", "xlabel": "Expert",
        "bar": "Share of tokens routed to the expert",
        "title": lambda r: (f"{r.label}\n{r.experts} experts, {r.experts_per_token:.3g} per "
                            f"token (uniform share {r.experts_per_token / r.experts:.3g})"),
        "ylabel": lambda r: ("Layer" if len(r.moe_layers) == r.layers
                             else f"MoE layer ({len(r.moe_layers)} of {r.layers})"),
    }
    return panel_row_heatmaps(
        fig, spec, ticker, runs, lambda r: r.expert_load, lambda r: r.moe_layers,
        lambda r: "Dense: no sparse MoE layers\n(no stats.expert_load)", style)


def layer_note(runs):
    if len(runs) == 2 and runs[0].layers != runs[1].layers:
        return (f"layer counts differ: {runs[0].label} {runs[0].layers}, "
                f"{runs[1].label} {runs[1].layers}")
    return None


def suptitle_text(title, runs, default=None):
    parts = [p for p in (title or default, layer_note(runs)) if p]
    return "\n".join(parts) if parts else None


def footer_text(runs):
    parts = [d for d in (r.describe() for r in runs) if d]
    return "; ".join(parts) if parts else None


def decorate(fig, title, runs, default_title=None):
    sup = suptitle_text(title, runs, default_title)
    if sup:
        fig.suptitle(sup, fontsize="large")
    foot = footer_text(runs)
    if foot:  # a figure-level x label, so the constrained layout keeps room for it
        fig.supxlabel(foot, x=0.01, ha="left", fontsize="x-small", color="0.4")


def build_figures(runs, title):
    Figure, ticker = import_matplotlib()
    colors = ["#1f77b4", "#d62728"]  # one colour per run, the same in every figure
    figures = {}

    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    panel_first_token(fig.add_subplot(), ticker, runs, colors)
    decorate(fig, title, runs)
    figures["first_token_attn.png"] = fig

    fig = Figure(figsize=(4.0 + 3.5 * len(runs), 5.0), layout="constrained")
    panel_heatmaps(fig, fig.add_gridspec(1, 1)[0, 0], ticker, runs)
    decorate(fig, title, runs, "Attention on the first token per layer and head")
    figures["first_token_heatmap.png"] = fig

    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    panel_gate_mean(fig.add_subplot(), ticker, runs, colors)
    decorate(fig, title, runs)
    figures["gate_mean.png"] = fig

    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    panel_max_activation(fig.add_subplot(), ticker, runs, colors)
    decorate(fig, title, runs)
    figures["max_activation.png"] = fig

    fig = Figure(figsize=(4.0 + 3.5 * len(runs), 5.0), layout="constrained")
    panel_expert_load(fig, fig.add_gridspec(1, 1)[0, 0], ticker, runs)
    decorate(fig, title, runs, "Share of tokens routed to each expert per MoE layer")
    figures["expert_load.png"] = fig

    # The expert load joins the summary as a third row only when a run has an MoE.
    moe = any(has_moe(r) for r in runs)
    fig = Figure(figsize=(14, 14 if moe else 9.5), layout="constrained")
    grid = fig.add_gridspec(3 if moe else 2, 2)
    panel_first_token(fig.add_subplot(grid[0, 0]), ticker, runs, colors)
    panel_heatmaps(fig, grid[0, 1], ticker, runs)
    panel_gate_mean(fig.add_subplot(grid[1, 0]), ticker, runs, colors)
    panel_max_activation(fig.add_subplot(grid[1, 1]), ticker, runs, colors)
    if moe:
        panel_expert_load(fig, grid[2, :], ticker, runs)
    default = "Per-layer statistics: " + " vs ".join(r.label for r in runs)
    decorate(fig, title, runs, default)
    figures["summary.png"] = fig
    return figures


def save_atomic(fig, out_dir, name):
    """Renders `fig` to a temporary file in `out_dir`, then renames it to `name`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
    try:
        os.fchmod(fd, 0o666 & ~UMASK)  # mkstemp makes 0600; give the PNG ordinary permissions
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=120)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(out_dir, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --------------------------------------------------------------------------- CLI

def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="plot_stats.py",
        usage="%(prog)s RUN.safetensors [RUN2.safetensors] --out DIR "
              "[--labels \"baseline,gated\"] [--title TEXT]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUN.safetensors",
                        help="one or two files written by `vkgate run --stats` on a whole model")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory for the PNGs (created if needed)")
    parser.add_argument("--labels", metavar="A[,B]",
                        help="comma-separated legend label per run (default: each file's stem)")
    parser.add_argument("--title", metavar="TEXT",
                        help="title shown above every figure (summary.png defaults to "
                             "'Per-layer statistics: A vs B')")
    args = parser.parse_args(argv)
    if len(args.runs) > 2:
        parser.error(f"at most two runs, got {len(args.runs)}")
    if args.labels is None:
        stems = [os.path.splitext(os.path.basename(p))[0] or p for p in args.runs]
        if len(stems) == 2 and stems[0] == stems[1]:
            stems = [f"{stems[0]} (1)", f"{stems[1]} (2)"]
        args.labels = stems
    else:
        labels = [s.strip() for s in args.labels.split(",")]
        if len(labels) != len(args.runs) or not all(labels):
            parser.error(f"--labels needs {len(args.runs)} non-empty comma-separated "
                         f"label(s), got {args.labels!r}")
        args.labels = labels
    if not args.out:
        parser.error("--out needs a directory")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        runs = [Run(path, label) for path, label in zip(args.runs, args.labels)]
    except InputError as e:
        fail(str(e))
    # Everything is validated before the first file is written.
    figures = build_figures(runs, args.title)
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        fail(f"{args.out}: cannot create the output directory: {e.strerror or e}")
    for name in OUTPUTS:
        path = os.path.join(args.out, name)
        try:
            save_atomic(figures[name], args.out, name)
        except OSError as e:
            fail(f"{path}: cannot write: {e.strerror or e}")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
