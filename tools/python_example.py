#!/usr/bin/env python3
"""vkgate from Python, notebook style: a model directory, a prompt, the paper's
per-layer attention sink as a picture, and one layer's gated attention
checked against PyTorch.

    PYTHONPATH=build/python python3 tools/python_example.py MODEL_DIR \\
        [--prompt "The capital of France is"] [--max-new-tokens 16] [--layer 0] [--out first_token_attn.png]

MODEL_DIR: a Hugging Face checkpoint directory (config.json, model.safetensors
or its index and shards, tokenizer.json for text; without one, --prompt-ids).
Needs numpy and matplotlib; the PyTorch comparison is skipped without torch
(Debian 12: apt-get install python3-matplotlib python3-torch).
"""
import argparse
import json
import os
import sys

import numpy as np

import vkgate


# ---- 1. A safetensors reader (numpy only): the checkpoint's tensors for PyTorch.

def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] == "BF16":  # the top half of a float32
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, {"F32": np.float32, "F16": np.float16}[info["dtype"]]).astype(np.float32)
        out[name] = a.reshape(info["shape"])
    return out


def checkpoint_tensors(model_dir, names):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(os.path.join(model_dir, "model.safetensors")) or not os.path.exists(index):
        files = ["model.safetensors"]
    else:
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted({weight_map[n] for n in names})
    tensors = {}
    for file in files:
        tensors.update(read_safetensors(os.path.join(model_dir, file)))
    return {n: tensors[n] for n in names}


# ---- 2. One layer's gated attention in PyTorch, float64, from the paper's equations.

def torch_gated_attention(torch, cfg, w, x):
    """cfg: vkgate.BlockConfig (gate at the SDPA output, G1); w: bare names -> numpy; x [B, T, D]."""
    f64 = {k: torch.tensor(v, dtype=torch.float64) for k, v in w.items()}
    hs = torch.tensor(x, dtype=torch.float64)
    B, T, _ = hs.shape
    H, KV, Dh, G = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.num_heads // cfg.num_kv_heads
    scale_of = (lambda v: 1 + v) if cfg.norm_kind == "zero_centered" else (lambda v: v)

    def norm(t, weight):
        return t / torch.sqrt(t.square().mean(-1, keepdim=True) + cfg.rms_norm_eps) * scale_of(weight)

    def project(t, name):
        y = t @ f64[name + ".weight"].T
        return y + f64[name + ".bias"] if name + ".bias" in f64 else y

    h = norm(hs, f64["input_layernorm.weight"])
    gw = {"none": 0, "headwise": 1, "elementwise": Dh}[cfg.gate_kind]
    rows = project(h, "q_proj")
    if cfg.gate_layout == "official_grouped":  # per KV group: [q of its G heads | their G gates]
        grouped = rows.view(B, T, KV, G * (Dh + gw))
        q = grouped[..., :G * Dh].reshape(B, T, H, Dh)
        g = grouped[..., G * Dh:].reshape(B, T, H, gw)
    elif cfg.gate_layout == "qwen3_next":  # per head: [q_h | g_h]
        q, g = rows.view(B, T, H, Dh + gw).split([Dh, gw], -1)
    else:
        q, g = rows.view(B, T, H, Dh), project(h, "gate_proj").view(B, T, H, gw)
    k = project(h, "k_proj").view(B, T, KV, Dh)
    v = project(h, "v_proj").view(B, T, KV, Dh)
    if cfg.use_qk_norm:
        q, k = norm(q, f64["q_norm.weight"]), norm(k, f64["k_norm.weight"])
    rd = cfg.rotary_dim
    freq = cfg.rope_theta ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * freq  # [T, rd/2]
    cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]

    def rotate(t):  # rotate_half pairs (i, i + rd/2)
        a, b, rest = t[..., :rd // 2], t[..., rd // 2:rd], t[..., rd:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], -1)

    q, k = rotate(q), rotate(k)
    k, v = k.repeat_interleave(G, 2), v.repeat_interleave(G, 2)  # query head h reads KV head h // G
    scores = torch.einsum("bthd,bshd->bhts", q, k) / Dh ** 0.5
    if cfg.causal:
        scores = scores + torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    out = torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v)
    if gw:
        out = out * torch.sigmoid(g)
    y = project(out.reshape(B, T, H * Dh), "o_proj")
    return (y + hs if cfg.residual else y).numpy()


# ---- 3. The walk-through.

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--prompt-ids", help="comma-separated ids, for a directory without tokenizer.json")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--layer", type=int, default=0, help="the layer whose attention is compared with PyTorch")
    ap.add_argument("--out", default="first_token_attn.png")
    ap.add_argument("--device", help="device index or name substring (default: the best)")
    args = ap.parse_args()

    ctx = vkgate.Context(args.device)
    print("device:", ctx.device["summary"])
    model = vkgate.Model.load(ctx, args.model_dir)
    cfg = model.config
    print("model: %s, %d layers, vocab %d" % (cfg.model_type, cfg.num_hidden_layers, cfg.vocab_size))

    # Run the prompt: text streamed as it is generated, or ids.
    if args.prompt_ids:
        ids = [int(i) for i in args.prompt_ids.split(",")]
        print("generated ids:", model.generate(ids, args.max_new_tokens).tolist())
    else:
        ids = vkgate.Tokenizer(args.model_dir).encode(args.prompt)
        print(args.prompt, end="", flush=True)
        for piece in model.generate(args.prompt, args.max_new_tokens):
            print(piece, end="", flush=True)
        print()

    # The paper's attention sink: how much each layer's heads attend to the first token.
    _, stats = model.logits(ids, stats=True)
    attn = stats["first_token_attn"]  # [layers, heads]
    if attn.size:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
        left.plot(attn.mean(1), marker="o")
        left.set(xlabel="layer", ylabel="attention on the first token", title="mean over heads", ylim=(0, 1))
        im = right.imshow(attn.T, aspect="auto", vmin=0, vmax=1, cmap="viridis")
        right.set(xlabel="layer", ylabel="head", title="per head")
        right.set_xticks(range(attn.shape[0]))
        right.set_yticks(range(attn.shape[1]))
        left.set_xticks(range(attn.shape[0]))
        fig.colorbar(im, ax=right)
        fig.tight_layout()
        fig.savefig(args.out, dpi=100)
        print("first-token attention per layer:", np.round(attn.mean(1), 3).tolist(), "->", args.out)

    if cfg.gla is not None:
        print("a GLA model: no softmax attention to compare with PyTorch")
        return 0
    # One layer's block on the device and in PyTorch, on the prompt's embeddings.
    block = vkgate.GatedAttention(ctx, None, args.model_dir, layer=args.layer)
    bare = list(vkgate.expected_weights(block.config))
    full = ["model.layers.%d.%s" % (args.layer, n if n == "input_layernorm.weight" else "self_attn." + n) for n in bare]
    tensors = checkpoint_tensors(args.model_dir, full + ["model.embed_tokens.weight"])
    x = tensors["model.embed_tokens.weight"][np.array(ids)][None].astype(np.float32)
    y = block.forward(x)
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: the comparison is skipped (apt-get install python3-torch)")
        return 0
    want = torch_gated_attention(torch, block.config, {b: tensors[f] for b, f in zip(bare, full)}, x)
    d = vkgate.reference.compare(y, want)
    print("layer %d attention, vkgate vs PyTorch float64: NMSE %.3g, max abs %.3g" % (args.layer, d["nmse"], d["max_abs"]))
    return 0 if d["nmse"] <= 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
