#!/usr/bin/env python3
"""PyTorch eager peer of `vkgate bench`: the same gated-attention block (Qwen3-Next
attention shapes by default) with scaled_dot_product_attention, timed with CUDA
events, printed as the same JSON shape (`cases[*].median_us/gflops/gbps`).

Weights are random (seeded) with the same shapes and dtypes as vkgate's
benchmark; the values do not change the timing. Runs on the first CUDA device.
"""
import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F


def rms_norm(x, w, eps, zero_centered):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * ((1.0 + w.float()) if zero_centered else w.float())).to(x.dtype)


def rope_rotate_half(x, cos, sin, rd):
    xr, xp = x[..., :rd], x[..., rd:]
    x1, x2 = xr[..., : rd // 2], xr[..., rd // 2:]
    rot = torch.cat((-x2, x1), dim=-1)
    return torch.cat((xr * cos + rot * sin, xp), dim=-1)


class Block:
    """Qwen3-Next style: q_proj rows per head [q_h | g_h], zero-centred norms, partial RoPE."""

    def __init__(self, hidden, heads, kv_heads, head_dim, rotary, dtype, device, theta=1e7):
        g = torch.Generator(device="cpu").manual_seed(7)
        def w(*shape, scale):
            return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)
        self.D, self.H, self.KV, self.Dh, self.rd = hidden, heads, kv_heads, head_dim, rotary
        self.norm = w(hidden, scale=0.1)
        self.q_proj = w(heads * head_dim * 2, hidden, scale=hidden ** -0.5)
        self.k_proj = w(kv_heads * head_dim, hidden, scale=hidden ** -0.5)
        self.v_proj = w(kv_heads * head_dim, hidden, scale=hidden ** -0.5)
        self.o_proj = w(hidden, heads * head_dim, scale=(heads * head_dim) ** -0.5)
        self.q_norm = w(head_dim, scale=0.1)
        self.k_norm = w(head_dim, scale=0.1)
        self.theta, self.dtype, self.device = theta, dtype, device

    def rope_tables(self, positions):
        inv = self.theta ** (-torch.arange(0, self.rd, 2, dtype=torch.float64, device=self.device) / self.rd)
        ang = positions.double()[:, None] * inv[None, :]
        ang = torch.cat((ang, ang), dim=-1)
        return ang.cos().to(self.dtype), ang.sin().to(self.dtype)

    def forward(self, x, past_k=None, past_v=None):
        B, T, _ = x.shape
        P = 0 if past_k is None else past_k.shape[2]
        xn = rms_norm(x, self.norm, 1e-6, True)
        qg = F.linear(xn, self.q_proj).view(B, T, self.H, 2 * self.Dh)
        q, gate = qg[..., : self.Dh], qg[..., self.Dh:]
        k = F.linear(xn, self.k_proj).view(B, T, self.KV, self.Dh)
        v = F.linear(xn, self.v_proj).view(B, T, self.KV, self.Dh)
        q = rms_norm(q, self.q_norm, 1e-6, True).transpose(1, 2)
        k = rms_norm(k, self.k_norm, 1e-6, True).transpose(1, 2)
        v = v.transpose(1, 2)
        cos, sin = self.rope_tables(torch.arange(P, P + T, device=self.device))
        q = rope_rotate_half(q, cos, sin, self.rd)
        k = rope_rotate_half(k, cos, sin, self.rd)
        if past_k is not None:
            k = torch.cat((past_k, k), dim=2)
            v = torch.cat((past_v, v), dim=2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=(P == 0 and T > 1), enable_gqa=True)
        o = o.transpose(1, 2) * torch.sigmoid(gate)
        return F.linear(o.reshape(B, T, self.H * self.Dh), self.o_proj)


def time_us(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times), min(times), max(times)


def case(name, us, flop, nbytes):
    med, lo, hi = us
    return {"name": name, "median_us": med, "min_us": lo, "max_us": hi,
            "gflops": flop / med / 1e3, "gbps": nbytes / med / 1e3, "flop": flop, "bytes": nbytes}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--T", type=int, default=4096)
    ap.add_argument("--past", type=int, default=32768, help="cache length of the decode case")
    ap.add_argument("--matmul", type=int, default=8192)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    dev = torch.device("cuda")
    D, H, KV, Dh, rd = 2048, 16, 2, 256, 64
    cases = []
    weight_elems = H * 2 * Dh * D + 2 * KV * Dh * D + D * H * Dh
    for dtype, tag in ((torch.float16, "fp16"), (torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        torch.backends.cuda.matmul.allow_tf32 = False
        blk = Block(D, H, KV, Dh, rd, dtype, dev)
        elt = torch.finfo(dtype).bits // 8
        x = torch.randn(1, args.T, D, device=dev, dtype=dtype)
        with torch.no_grad():
            us = time_us(lambda: blk.forward(x), args.warmup, args.reps)
        flop = 2.0 * args.T * weight_elems + 4.0 * H * args.T * args.T * Dh
        cases.append(case(f"torch block prefill B1 T{args.T} {tag}", us, flop,
                          weight_elems * elt + 2.0 * args.T * D * elt + 2.0 * KV * args.T * Dh * elt))
        pk = torch.randn(1, KV, args.past, Dh, device=dev, dtype=dtype)
        pv = torch.randn_like(pk)
        x1 = torch.randn(1, 1, D, device=dev, dtype=dtype)
        with torch.no_grad():
            us = time_us(lambda: blk.forward(x1, pk, pv), args.warmup, args.reps)
        S = args.past + 1
        cases.append(case(f"torch block decode B1 T1 past {args.past} {tag}", us,
                          2.0 * weight_elems + 4.0 * H * S * Dh,
                          weight_elems * elt + 2.0 * KV * S * Dh * elt))
        del blk, pk, pv
    n = args.matmul
    a = torch.randn(n, n, device=dev, dtype=torch.float16)
    b = torch.randn(n, n, device=dev, dtype=torch.float16)
    us = time_us(lambda: a @ b.t(), args.warmup, args.reps)
    cases.append(case(f"torch matmul {n}x{n}x{n} f16", us, 2.0 * n ** 3, 3.0 * n * n * 2))
    print(json.dumps({"device": {"name": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                 "cuda": torch.version.cuda}, "cases": cases}, indent=2))


if __name__ == "__main__":
    main()
