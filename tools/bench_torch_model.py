#!/usr/bin/env python3
"""PyTorch eager peer of `vkgate bench --model-shape qwen3-0.6b`: the same Qwen3
model (28 layers, hidden 1024, 16 query and 8 key/value heads of 128, SwiGLU
3072, q/k RMSNorm, RoPE θ 1e6, tied 151,936-token embeddings) with random
weights, prefill of --prompt tokens then --decode greedy steps over a
preallocated KV cache, scaled_dot_product_attention; timed with CUDA events.
Prints JSON: prefill and decode tokens/s, as `vkgate bench --model --json`
names them. Runs on the first CUDA device; the values do not change the timing.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

SHAPE = dict(hidden=1024, heads=16, kv_heads=8, head_dim=128, inter=3072, layers=28, vocab=151936,
             theta=1e6, eps=1e-6)


def rms(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


class Qwen3:
    def __init__(self, s, dtype, dev, ctx):
        g = torch.Generator(device="cpu").manual_seed(7)
        self.s, self.dtype = s, dtype

        def w(*shape, scale=0.02):
            return (torch.randn(*shape, generator=g) * scale).to(device=dev, dtype=dtype)

        D, H, KV, Dh, I = s["hidden"], s["heads"], s["kv_heads"], s["head_dim"], s["inter"]
        self.embed = w(s["vocab"], D)
        self.layers = [dict(n1=w(D, scale=0.1) + 1, qkv=w((H + 2 * KV) * Dh, D), qn=w(Dh, scale=0.1) + 1,
                            kn=w(Dh, scale=0.1) + 1, o=w(D, H * Dh), n2=w(D, scale=0.1) + 1,
                            gu=w(2 * I, D), down=w(D, I)) for _ in range(s["layers"])]
        self.norm = w(D, scale=0.1) + 1
        inv = 1.0 / (s["theta"] ** (torch.arange(0, Dh, 2, device=dev).float() / Dh))
        ang = torch.outer(torch.arange(ctx, device=dev).float(), inv)
        self.cos = torch.cat((ang, ang), -1).cos().to(dtype)
        self.sin = torch.cat((ang, ang), -1).sin().to(dtype)
        self.k = torch.zeros(s["layers"], 1, KV, ctx, Dh, device=dev, dtype=dtype)
        self.v = torch.zeros_like(self.k)

    def rope(self, x, pos):  # x [1, heads, T, Dh]
        c, s = self.cos[pos], self.sin[pos]
        h = x.shape[-1] // 2
        return x * c + torch.cat((-x[..., h:], x[..., :h]), -1) * s

    def forward(self, ids, start):
        s = self.s
        H, KV, Dh, eps = s["heads"], s["kv_heads"], s["head_dim"], s["eps"]
        T = ids.shape[1]
        pos = torch.arange(start, start + T, device=ids.device)
        x = self.embed[ids]
        for i, L in enumerate(self.layers):
            h = rms(x, L["n1"], eps) @ L["qkv"].t()
            q, k, v = h.split((H * Dh, KV * Dh, KV * Dh), -1)
            q = self.rope(rms(q.reshape(1, T, H, Dh), L["qn"], eps).transpose(1, 2), pos)
            k = self.rope(rms(k.reshape(1, T, KV, Dh), L["kn"], eps).transpose(1, 2), pos)
            self.k[i, :, :, start:start + T] = k
            self.v[i, :, :, start:start + T] = v.reshape(1, T, KV, Dh).transpose(1, 2)
            kk, vv = self.k[i, :, :, :start + T], self.v[i, :, :, :start + T]
            a = F.scaled_dot_product_attention(q, kk, vv, is_causal=T > 1 and start == 0, enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(1, T, H * Dh) @ L["o"].t()
            gu = rms(x, L["n2"], eps) @ L["gu"].t()
            gate, up = gu.chunk(2, -1)
            x = x + (F.silu(gate) * up) @ L["down"].t()
        return rms(x[:, -1:], self.norm, eps) @ self.embed.t()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    dev = torch.device("cuda")
    cases = []
    for dtype, tag in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        m = Qwen3(SHAPE, dtype, dev, args.prompt + args.decode + 1)
        ids = torch.randint(0, SHAPE["vocab"], (1, args.prompt), device=dev)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        prefill, decode = [], []
        with torch.no_grad():
            for rep in range(args.reps + 1):  # the first is the warm-up
                start.record()
                logits = m.forward(ids, 0)
                stop.record()
                torch.cuda.synchronize()
                p_ms = start.elapsed_time(stop)
                tok = logits.argmax(-1)
                start.record()
                for i in range(args.decode):
                    tok = m.forward(tok, args.prompt + i).argmax(-1)
                stop.record()
                torch.cuda.synchronize()
                if rep:
                    prefill.append(p_ms)
                    decode.append(start.elapsed_time(stop))
        p, d = statistics.median(prefill), statistics.median(decode)
        cases.append({"name": f"torch qwen3-0.6b {tag}", "prompt": args.prompt, "decode": args.decode,
                      "prefill_ms": p, "prefill_tokens_per_s": args.prompt / p * 1e3,
                      "decode_ms": d, "decode_tokens_per_s": args.decode / d * 1e3})
        del m
        torch.cuda.empty_cache()
    print(json.dumps({"device": {"name": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                 "cuda": torch.version.cuda}, "cases": cases}, indent=2))


if __name__ == "__main__":
    main()
