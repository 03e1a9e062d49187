"""A block against a PyTorch float64 implementation written here from the
paper's equations (Qiu et al. 2025, Qwen3-Next layout): an independent check
of the oracle and the device together. Skipped without PyTorch
(Debian 12: apt-get install python3-torch)."""
import numpy as np
import pytest

import vkgate
from conftest import NMSE_FP32, assert_close, block_weights, random_x, tiny_config

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: apt-get install python3-torch)")


def rms_norm(x, w, eps, zero_centered):
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * (1 + w) if zero_centered else x * w


def rope(x, positions, rotary_dim, theta):
    """rotate_half RoPE on the first rotary_dim dims of x [B, heads, T, Dh]."""
    inv_freq = theta ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = positions[:, None].double() * inv_freq[None, :]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    r, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    half = rotary_dim // 2
    rotated = torch.cat([-r[..., half:], r[..., :half]], -1)
    return torch.cat([r * cos + rotated * sin, rest], -1)


def gated_attention(cfg, w, x):
    """cfg: a vkgate.BlockConfig (qwen3_next layout, sdpa gate); w: numpy weights; x [B, T, D]."""
    t = {k: torch.from_numpy(v).double() for k, v in w.items()}
    x = torch.from_numpy(x).double()
    B, T, _ = x.shape
    H, KV, Dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    zc = cfg.norm_kind == "zero_centered"
    h = rms_norm(x, t["input_layernorm.weight"], cfg.rms_norm_eps, zc)
    gw = {"none": 0, "headwise": 1, "elementwise": Dh}[cfg.gate_kind]
    qg = (h @ t["q_proj.weight"].T).view(B, T, H, Dh + gw)
    q, gate = qg[..., :Dh], qg[..., Dh:]
    k = (h @ t["k_proj.weight"].T).view(B, T, KV, Dh)
    v = (h @ t["v_proj.weight"].T).view(B, T, KV, Dh)
    if cfg.use_qk_norm:
        q = rms_norm(q, t["q_norm.weight"], cfg.rms_norm_eps, zc)
        k = rms_norm(k, t["k_norm.weight"], cfg.rms_norm_eps, zc)
    positions = torch.arange(T)
    q = rope(q.transpose(1, 2), positions, cfg.rotary_dim, cfg.rope_theta)
    k = rope(k.transpose(1, 2), positions, cfg.rotary_dim, cfg.rope_theta)
    v = v.transpose(1, 2)
    k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
    scores = q @ k.transpose(-1, -2) / Dh ** 0.5
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2)  # [B, T, H, Dh]
    if gw:
        y = y * torch.sigmoid(gate)
    return (y.reshape(B, T, H * Dh) @ t["o_proj.weight"].T).numpy()


@pytest.mark.parametrize("fields", [
    dict(),
    dict(gate_kind="headwise"),
    dict(gate_kind="none"),
    dict(norm_kind="zero_centered", partial_rotary_factor=0.5, rope_theta=1e6),
    dict(num_kv_heads=1, use_qk_norm=False),
])
def test_block_against_pytorch(ctx, rng, fields):
    cfg = tiny_config(**fields)
    w = block_weights(cfg, rng)
    x = random_x(rng, 2, 7, 32)
    want = gated_attention(cfg, w, x)
    assert_close(vkgate.GatedAttention(ctx, cfg, w).forward(x), want, NMSE_FP32)
    # the oracle agrees with PyTorch to double precision
    assert np.abs(vkgate.reference.forward(cfg, w, x)["output"] - want).max() < 1e-10
