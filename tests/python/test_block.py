"""GatedAttention against vkgate.reference (the C++ tests' NMSE bounds)."""
import os

import numpy as np
import pytest

import vkgate
from conftest import (NMSE_BLOCK, assert_close, block_weights, random_x, stored, tiny_block, tiny_config,
                      write_safetensors)


@pytest.mark.parametrize("gate", ["elementwise", "headwise", "none"])
def test_forward_matches_reference(ctx, rng, gate):
    cfg, w, block, x, want = tiny_block(ctx, rng, 2, 5, gate_kind=gate)
    y = block.forward(x)
    assert y.dtype == np.float32 and y.shape == (2, 5, 32)
    assert_close(y, want)
    assert block.recorded_shapes == 1
    assert block.config.gate_kind == gate and block.precision == "fp32"


@pytest.mark.parametrize("fields", [
    dict(gate_layout="official_grouped"),
    dict(gate_position="value", gate_layout="separate"),
    dict(gate_position="dense", gate_layout="separate"),
    dict(gate_position="query", gate_layout="separate", gate_kind="headwise"),
    dict(gate_combine="add", gate_activation="silu", gate_shared_heads=True, gate_kind="headwise"),
    dict(qkv_bias=True, o_bias=True, residual=True, norm_kind="zero_centered"),
    dict(gqa_mapping="tiled", rope_style="interleaved", partial_rotary_factor=0.5),
])
def test_variants_match_reference(ctx, rng, fields):
    cfg, w, block, x, want = tiny_block(ctx, rng, 1, 4, **fields)
    assert_close(block.forward(x), want)


def test_cache_mask_and_stats(ctx, rng):
    cfg = tiny_config()
    w = block_weights(cfg, rng)
    block = vkgate.GatedAttention(ctx, cfg, w)
    B, T, P = 1, 3, 4
    x = random_x(rng, B, T, 32)
    pk, pv = random_x(rng, B, 2, P, 8), random_x(rng, B, 2, P, 8)
    mask = np.zeros((B, 1, T, P + T), np.float32)
    mask[..., 1] = -np.inf
    y, k, v, stats = block.forward(x, pk, pv, attention_mask=mask, stats=True, return_cache=True)
    want = vkgate.reference.forward(cfg, w, x, pk, pv, mask)
    assert_close(y, want["output"])
    assert_close(k, want["k"])
    assert_close(v, want["v"])
    assert k.shape == (B, 2, P + T, 8)
    np.testing.assert_allclose(stats["first_token_attn"], want["first_token_attn"], rtol=1e-4, atol=1e-6)
    assert stats["gate_mean"] == pytest.approx(want["gate"].mean(), rel=1e-4)
    assert stats["gate_frac_below_0_1"] == pytest.approx((want["gate"] < 0.1).mean(), abs=1e-6)
    # stats alone: a pair
    y2, s2 = block.forward(x, pk, pv, attention_mask=mask, stats=True)
    np.testing.assert_array_equal(y2, y)


def test_device_cache_decode_loop(ctx, rng):
    cfg, w, block, x, want = tiny_block(ctx, rng, 1, 6)
    block.reserve_cache(1, 8)
    assert block.cache_length == 0
    assert_close(block.forward(x[:, :4], use_device_cache=True), want[:, :4])
    for t in (4, 5):
        assert_close(block.forward(x[:, t:t + 1], use_device_cache=True), want[:, t:t + 1])
    assert block.cache_length == 6
    block.truncate_cache(5)
    assert_close(block.forward(x[:, 5:6], use_device_cache=True), want[:, 5:6])
    # load_cache from the oracle's keys and values of the first 4 positions
    full = vkgate.reference.forward(cfg, w, x[:, :4])
    block.load_cache(full["k"].astype(np.float32), full["v"].astype(np.float32), capacity=8)
    assert block.cache_length == 4
    assert_close(block.forward(x[:, 4:6], use_device_cache=True), want[:, 4:6])


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_storage(ctx, rng, precision):
    cfg = tiny_config()
    w = block_weights(cfg, rng)
    x = random_x(rng, 1, 4, 32)
    block = vkgate.GatedAttention(ctx, cfg, w, precision=precision)
    assert block.precision == precision
    assert_close(block.forward(x), vkgate.reference.forward(cfg, stored(w, precision), x)["output"], NMSE_BLOCK[precision])


def test_float16_weights_and_strided_input(ctx, rng):
    cfg = tiny_config()
    w16 = {k: v.astype(np.float16) for k, v in block_weights(cfg, rng).items()}
    block = vkgate.GatedAttention(ctx, cfg, w16, precision="fp16")
    x = random_x(rng, 4, 32, 2)[:, :, 0].reshape(1, 4, 32)
    xt = random_x(rng, 32, 4, 1).transpose(2, 1, 0)  # not C-contiguous: copied once
    assert not xt.flags.c_contiguous
    want = vkgate.reference.forward(cfg, {k: v.astype(np.float32) for k, v in w16.items()}, xt)["output"]
    assert_close(block.forward(xt), want, NMSE_BLOCK["fp16"])
    assert block.forward(x).shape == (1, 4, 32)


def test_checkpoint_file_and_directory(ctx, rng, tmp_path):
    cfg = tiny_config(gate_kind="headwise")
    w = block_weights(cfg, rng)
    x = random_x(rng, 1, 3, 32)
    want = vkgate.reference.forward(cfg, w, x)["output"]
    write_safetensors(tmp_path / "block.safetensors", w)
    assert_close(vkgate.GatedAttention(ctx, cfg, tmp_path / "block.safetensors").forward(x), want)
    # A model directory's layer 1, its config read from config.json.
    d = tmp_path / "model"
    os.makedirs(d)
    (d / "config.json").write_text(
        '{"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,'
        ' "num_hidden_layers": 2, "headwise_attn_output_gate": true, "model_type": "qwen3"}')
    loaded = vkgate.load_config(str(d / "config.json"))
    lw = vkgate.expected_weights(loaded)
    w1 = {n: rng.standard_normal(s).astype(np.float32) * 0.2 for n, s in lw.items()}
    prefixed = {("model.layers.1.input_layernorm.weight" if n == "input_layernorm.weight"
                 else "model.layers.1.self_attn." + n): a for n, a in w1.items()}
    write_safetensors(d / "model.safetensors", prefixed)
    block = vkgate.GatedAttention(ctx, None, str(d), layer=1)
    assert_close(block.forward(x), vkgate.reference.forward(loaded, w1, x)["output"])


def test_timings_and_poison(ctx, rng):
    cfg, w, block, x, want = tiny_block(ctx, rng, 1, 2)
    block.set_poison(True)
    assert_close(block.forward(x), want)
    timings = block.last_timings()
    assert all(isinstance(s, str) and us >= 0 for s, us in timings)
    if ctx.device["capabilities"]["timestamps"]:
        assert timings
    # Context(timestamps=...) decides before VKGATE_TIMESTAMPS (set for these tests).
    for on in (True, False):
        c = vkgate.Context(ctx.device["index"], timestamps=on)
        b = vkgate.GatedAttention(c, cfg, w)
        assert_close(b.forward(x), want)
        assert bool(b.last_timings()) == (on and c.device["capabilities"]["timestamps"])
    with pytest.raises(vkgate.Error, match="timestamps"):
        vkgate.Context(ctx.device["index"], timestamps="yes")
