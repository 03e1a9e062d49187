"""GlaLayer against vkgate.reference.gla_forward."""
import numpy as np
import pytest

import vkgate
from conftest import assert_close, random_weights, random_x, write_safetensors


def gla_config(**fields):
    c = dict(hidden_size=32, num_heads=2, num_kv_heads=2)
    c.update(fields)
    return vkgate.GlaConfig(**c)


@pytest.mark.parametrize("forms", [dict(), dict(low_rank_dim=4, output_norm="g_norm_swish_gate.weight", attn_norm=True)])
def test_forward_and_state(ctx, rng, forms):
    cfg = gla_config()
    w = random_weights(vkgate.gla_expected_weights(cfg, **forms), rng)
    layer = vkgate.GlaLayer(ctx, cfg, w)
    assert layer.forms["low_rank_dim"] == forms.get("low_rank_dim", 0)
    x = random_x(rng, 2, 6, 32)
    y, state = layer.forward(x)
    want = vkgate.reference.gla_forward(cfg, w, x)
    assert y.shape == (2, 6, 32) and state.shape == (2, 2, cfg.head_k_dim, cfg.head_v_dim)
    assert_close(y, want["output"])
    assert_close(state, want["final_state"])
    # the sequence in two pieces, the state carried
    y1, s1 = layer.forward(x[:, :4])
    y2, s2 = layer.forward(x[:, 4:], initial_state=s1)
    assert_close(np.concatenate([y1, y2], axis=1), want["output"])
    assert_close(s2, want["final_state"])


def test_checkpoint_directory(ctx, rng, tmp_path):
    (tmp_path / "config.json").write_text('{"mixer": "gla", "hidden_size": 32, "num_heads": 2, "expand_k": 0.5}')
    cfg = vkgate.load_gla_config(str(tmp_path / "config.json"))
    w = random_weights(vkgate.gla_expected_weights(cfg, output_norm="g_norm_swish_gate.weight"), rng)
    write_safetensors(tmp_path / "model.safetensors", w)
    layer = vkgate.GlaLayer(ctx, None, str(tmp_path))
    x = random_x(rng, 1, 3, 32)
    assert_close(layer.forward(x)[0], vkgate.reference.gla_forward(cfg, w, x)["output"])


def test_bad_state_shape(ctx, rng):
    cfg = gla_config()
    layer = vkgate.GlaLayer(ctx, cfg, random_weights(vkgate.gla_expected_weights(cfg), rng))
    with pytest.raises(vkgate.Error) as e:
        layer.forward(random_x(rng, 1, 2, 32), initial_state=np.zeros((1, 2, 3, 3), np.float32))
    assert e.value.code == "shape_mismatch" and "initial_state" in str(e.value)


def test_gla_model_directory(ctx, rng, tmp_path):
    (tmp_path / "config.json").write_text(
        '{"model_type": "gla", "hidden_size": 32, "num_heads": 2, "num_hidden_layers": 2, "vocab_size": 50,'
        ' "intermediate_size": 48, "gate_low_rank_dim": 4, "eos_token_id": 1}')
    cfg = vkgate.load_model_config(str(tmp_path))
    assert cfg.gla is not None and cfg.gla.num_heads == 2
    w = random_weights(vkgate.expected_model_weights(cfg), rng)
    write_safetensors(tmp_path / "model.safetensors", w)
    model = vkgate.Model.load(ctx, tmp_path)
    ids = np.array([[3, 1, 4, 1, 5]])
    want = vkgate.reference.model_forward(cfg, w, ids)
    logits, stats = model.logits(ids, stats=True)
    assert_close(logits, want["logits"], 1e-8)
    assert stats["first_token_attn"].size == 0 and stats["max_activation"].shape == (2,)
    np.testing.assert_array_equal(model.generate([3, 1, 4], 4, stop_at_eos=False),
                                  vkgate.reference.greedy_generate(cfg, w, [3, 1, 4], 4, stop_at_eos=False))
