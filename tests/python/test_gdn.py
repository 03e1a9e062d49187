"""GatedDeltaNet against vkgate.reference.gdn_forward."""
import os

import numpy as np
import pytest

import vkgate
from conftest import assert_close, random_model_weights, random_x, write_safetensors


def gdn_config(**fields):
    c = dict(hidden_size=40, num_key_heads=2, num_value_heads=4, key_head_dim=8, value_head_dim=6, conv_kernel=3)
    c.update(fields)
    return vkgate.GdnConfig(**c)


def gdn_weights(cfg, rng):
    """Projections ~ N(0, 1/in); decays and norms in the ranges trained checkpoints hold."""
    w = {}
    for name, shape in vkgate.gdn_expected_weights(cfg).items():
        if name == "A_log":
            a = np.log(0.05 + 3 * rng.random(shape))
        elif name == "dt_bias":
            a = -3 + 4 * rng.random(shape)
        elif name == "norm.weight":
            a = 1 + 0.2 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / np.sqrt(shape[-1])
        w[name] = a.astype(np.float32)
    return w


def states(cfg, rng, batch):
    conv = random_x(rng, batch, cfg.conv_channels, cfg.conv_kernel - 1)
    state = 0.3 * random_x(rng, batch, cfg.num_value_heads, cfg.key_head_dim, cfg.value_head_dim)
    return conv, state.astype(np.float32)


def test_forward_and_both_states(ctx, rng):
    cfg = gdn_config()
    assert (cfg.group_size, cfg.key_dim, cfg.value_dim, cfg.conv_channels) == (2, 16, 24, 56)
    w = gdn_weights(cfg, rng)
    layer = vkgate.GatedDeltaNet(ctx, cfg, w)
    layer.set_poison(True)
    x = random_x(rng, 2, 9, 40)
    conv, state = states(cfg, rng, 2)
    y, s, c = layer.forward(x, conv, state)
    want = vkgate.reference.gdn_forward(cfg, w, x, conv, state)
    assert y.shape == (2, 9, 40) and s.shape == (2, 4, 8, 6) and c.shape == (2, 56, 2)
    assert_close(y, want["output"], 1e-9)
    assert_close(s, want["final_state"], 1e-9)
    assert_close(c, want["final_conv_state"], 1e-9)
    # the sequence in two pieces, both states carried; zero states by default
    y1, s1, c1 = layer.forward(x[:, :4], conv, state)
    y2, s2, c2 = layer.forward(x[:, 4:], c1, s1)
    assert_close(np.concatenate([y1, y2], axis=1), want["output"], 1e-9)
    assert_close(s2, want["final_state"], 1e-9)
    assert_close(layer.forward(x)[0], vkgate.reference.gdn_forward(cfg, w, x)["output"], 1e-9)


def test_checkpoint_directory(ctx, rng, tmp_path):
    (tmp_path / "config.json").write_text(
        '{"mixer": "gated_deltanet", "hidden_size": 40, "linear_num_key_heads": 2, "linear_num_value_heads": 4,'
        ' "linear_key_head_dim": 8, "linear_value_head_dim": 6, "linear_conv_kernel_dim": 3}')
    cfg = vkgate.load_gdn_config(str(tmp_path / "config.json"))
    assert cfg.conv_kernel == 3 and cfg.num_value_heads == 4
    w = gdn_weights(cfg, rng)
    write_safetensors(tmp_path / "model.safetensors", w)
    layer = vkgate.GatedDeltaNet(ctx, None, str(tmp_path), precision="fp16")
    x = random_x(rng, 1, 5, 40)
    assert_close(layer.forward(x)[0], vkgate.reference.gdn_forward(cfg, w, x)["output"], 1e-4)


def test_bad_shapes_and_config(ctx, rng):
    cfg = gdn_config()
    layer = vkgate.GatedDeltaNet(ctx, cfg, gdn_weights(cfg, rng))
    x = random_x(rng, 1, 2, 40)
    for name, kwargs in (("conv_state", dict(conv_state=np.zeros((1, 56, 3), np.float32))),
                         ("initial_state", dict(initial_state=np.zeros((1, 4, 6, 8), np.float32)))):
        with pytest.raises(vkgate.Error) as e:
            layer.forward(x, **kwargs)
        assert e.value.code == "shape_mismatch" and name in str(e.value)
    with pytest.raises(vkgate.Error) as e:
        gdn_config(num_value_heads=3).validate()
    assert "linear_num_value_heads" in str(e.value) or "num_value_heads" in str(e.value)
    w = gdn_weights(cfg, rng)
    del w["A_log"]
    with pytest.raises(vkgate.Error) as e:
        vkgate.GatedDeltaNet(ctx, cfg, w)
    assert e.value.code == "missing_tensor" and "A_log" in str(e.value)


@pytest.mark.parametrize("mode", ["recurrent", "chunk"])
def test_forced_form(rng, mode, monkeypatch):
    monkeypatch.setenv("VKGATE_GDN_MODE", mode)
    c = vkgate.Context(device=os.environ.get("VKGATE_TEST_DEVICE") or None, validation=True)
    cfg = gdn_config()
    w = gdn_weights(cfg, rng)
    layer = vkgate.GatedDeltaNet(c, cfg, w)
    assert layer.chunked(70) == (mode == "chunk")
    x = random_x(rng, 1, 70, 40)
    assert_close(layer.forward(x)[0], vkgate.reference.gdn_forward(cfg, w, x)["output"], 1e-9)
    assert not c.take_validation_messages()


def test_qwen3_next_model_directory(ctx, rng, tmp_path):
    """A Qwen3-Next model with dense MLPs: Gated DeltaNet layers 0 and 2, attention 1 and 3."""
    (tmp_path / "config.json").write_text(
        '{"model_type": "qwen3_next", "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,'
        ' "head_dim": 16, "intermediate_size": 48, "num_hidden_layers": 4, "vocab_size": 60,'
        ' "full_attention_interval": 2, "linear_num_key_heads": 2, "linear_num_value_heads": 4,'
        ' "linear_key_head_dim": 8, "linear_value_head_dim": 6, "linear_conv_kernel_dim": 3, "num_experts": 0}')
    cfg = vkgate.load_model_config(str(tmp_path))
    assert cfg.model_type == "qwen3_next" and cfg.linear_attention.num_value_heads == 4
    specs = vkgate.expected_model_weights(cfg)
    assert "model.layers.0.linear_attn.A_log" in specs and "model.layers.1.self_attn.q_proj.weight" in specs
    w = random_model_weights(specs, rng)
    write_safetensors(tmp_path / "model.safetensors", w)
    model = vkgate.Model.load(ctx, tmp_path)
    ids = rng.integers(0, 60, size=(1, 6))
    want = vkgate.reference.model_forward(cfg, w, ids)
    assert_close(model.logits(ids), want["logits"].reshape(1, 6, 60), 1e-8)
    # The states sum every position: a sequence goes back only to its checkpoint (or 0).
    seq = model.start(1, 4)
    model.extend(seq, ids[:, :3])
    seq.checkpoint()
    seq.reserve(6)
    assert (seq.capacity, seq.checkpoint_length, seq.rollback_length(4)) == (6, 3, 3)
    for t in (3, 4):
        model.extend(seq, ids[:, t:t + 1])
    with pytest.raises(vkgate.Error, match="checkpoint at 3"):
        seq.truncate(4)
    seq.truncate(3)
    assert_close(model.extend(seq, ids[:, 3:4]), want["logits"].reshape(1, 6, 60)[:, 3], 1e-8)
