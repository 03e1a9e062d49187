"""devices(), Context, the config classes and their parsers, the docs; any
argument of any type raises an exception, never takes the interpreter down."""
import itertools

import numpy as np
import pytest

import vkgate
from conftest import TOKENIZER_JSON, block_weights, random_weights, tiny_config, write_model


def test_devices_and_context(ctx):
    devs = vkgate.devices()
    assert devs and {"index", "name", "type", "driver", "api_version", "summary", "capabilities"} <= set(devs[0])
    assert {"subgroup_size", "storage_buffer_arrays", "max_stage_storage_buffers"} <= set(devs[0]["capabilities"])
    assert ctx.device["name"] in [d["name"] for d in devs]
    assert ctx.validation_messages == ctx.validation_messages  # a count, readable any time
    assert not ctx.device_lost
    same = vkgate.Context(ctx.device["index"])
    assert same.device["name"] == ctx.device["name"] and not same.validation_enabled
    assert vkgate.Context(ctx.device["name"][:4]).device["index"] == ctx.device["index"]


def test_device_memory_limit(rng):
    small = vkgate.Context(device_memory_limit=64 << 10)
    cfg = tiny_config(hidden_size=256, num_heads=8, num_kv_heads=4, head_dim=32)
    with pytest.raises(vkgate.Error) as e:
        vkgate.GatedAttention(small, cfg, block_weights(cfg, rng))
    assert e.value.code == "out_of_memory"
    assert small.device_memory_in_use == 0


def test_block_config_fields_and_parsing(tmp_path):
    cfg = vkgate.BlockConfig.qwen3_next_attention()
    assert (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (2048, 16, 2, 256)
    assert cfg.norm_kind == "zero_centered" and cfg.rotary_dim == 64 and cfg.group_size == 8
    copy = cfg.copy()
    copy.gate_kind = "headwise"
    assert cfg.gate_kind == "elementwise" and copy.gate_width == 1
    assert "gate_position='sdpa'" in repr(cfg) and set(vkgate.BlockConfig.FIELDS) >= {"gqa_mapping", "residual"}
    parsed = vkgate.parse_config_json('{"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16}', "mine.json")
    assert parsed.num_kv_heads == 4
    with pytest.raises(vkgate.Error) as e:
        vkgate.parse_config_json('{"hidden_size": "x"}', "mine.json")
    assert e.value.code == "invalid_config" and "mine.json" in str(e.value) and "hidden_size" in str(e.value)
    with pytest.raises(vkgate.Error) as e:
        vkgate.load_config(str(tmp_path / "none.json"))
    assert e.value.code == "io"
    specs = vkgate.expected_weights(tiny_config())
    assert specs["q_proj.weight"] == (64, 32) and list(specs)[0] == "input_layernorm.weight"


def test_model_and_gla_configs():
    m = vkgate.parse_model_config_json(
        '{"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1,'
        ' "intermediate_size": 40, "vocab_size": 10, "eos_token_id": [1, 2]}')
    assert m.model_type == "llama" and m.attention.head_dim == 8 and m.eos_token_ids == [1, 2] and m.gla is None
    assert "model.layers.0.mlp.down_proj.weight" in vkgate.expected_model_weights(m)
    m.hidden_act = "gelu"
    with pytest.raises(vkgate.Error):
        m.hidden_act = "relu6"
    g = vkgate.GlaConfig(hidden_size=64, num_heads=4, num_kv_heads=4, feature_map="relu", clamp_min=-5.0)
    assert (g.head_k_dim, g.head_v_dim, g.clamp_min, g.gla_scale) == (8, 16, -5.0, None)
    assert g.scale == pytest.approx(8 ** -0.5)
    assert "gk_proj.1.weight" in vkgate.gla_expected_weights(g, low_rank_dim=4)


def test_docs_name_every_argument():
    doc = vkgate.GatedAttention.__doc__ + vkgate.GatedAttention.__init__.__doc__
    for arg in ("ctx", "config", "weights", "layer", "precision", "check_finite"):
        assert arg + ":" in doc or arg + "=" in doc, arg
    for arg in ("past_key", "past_value", "attention_mask", "stats", "return_cache", "use_device_cache"):
        assert arg + ":" in vkgate.GatedAttention.forward.__doc__, arg
    assert "prompt" in vkgate.Model.generate.__doc__ and "ids" in vkgate.Model.logits.__doc__
    assert vkgate.Error.__doc__ and "code" in vkgate.Error.__doc__
    assert vkgate.__version__


def test_any_argument_raises_never_crashes(ctx, rng, tmp_path):
    cfg = tiny_config()
    w = block_weights(cfg, rng)
    block = vkgate.GatedAttention(ctx, cfg, w)
    mcfg, _ = write_model(tmp_path, rng)
    model = vkgate.Model.load(ctx, tmp_path)
    seq = model.start(1, 4)
    gcfg = vkgate.GlaConfig(hidden_size=32, num_heads=2, num_kv_heads=2)
    gla = vkgate.GlaLayer(ctx, gcfg, random_weights(vkgate.gla_expected_weights(gcfg), rng))
    tok = vkgate.Tokenizer(TOKENIZER_JSON)
    junk = [None, 0, -1, 2**70, 1.5, "x", b"x", [], [[1], [2, 3]], {}, object(), np.zeros(0, np.float32),
            np.zeros((1, 1, 32), np.complex64), np.zeros((1, 1, 32), object), np.zeros((1, 1, 32), bool),
            np.zeros((1, 2, 3, 4, 5), np.float32), np.ones((2, 2), np.float32)[::2]]
    calls = [
        lambda a: block.forward(a),
        lambda a: block.forward(np.zeros((1, 1, 32), np.float32), past_key=a, past_value=a),
        lambda a: block.forward(np.zeros((1, 1, 32), np.float32), attention_mask=a),
        lambda a: block.load_cache(a, a),
        lambda a: block.reserve_cache(a, a),
        lambda a: block.truncate_cache(a),
        lambda a: vkgate.GatedAttention(ctx, a, w),
        lambda a: vkgate.GatedAttention(ctx, cfg, a),
        lambda a: vkgate.GatedAttention(ctx, cfg, {"q_proj.weight": a}),
        lambda a: vkgate.Context(a),
        lambda a: tok.decode(a),
        lambda a: tok.encode(a),
        lambda a: vkgate.reference.forward(cfg, w, a),
        lambda a: vkgate.reference.compare(a, a),
        lambda a: vkgate.reference.linear(a, a),
        lambda a: vkgate.BlockConfig(hidden_size=a),
        lambda a: model.logits(a),
        lambda a: model.generate(a, 2),
        lambda a: model.generate([1], a),
        lambda a: model.extend(seq, a),
        lambda a: model.extend_together(a, [1]),
        lambda a: model.extend_together([seq], a),
        lambda a: model.extend_top([seq], [1], a),
        lambda a: vkgate.TextStream.step_all(a),
        lambda a: vkgate.TextStream.prefill_all(a, 1),
        lambda a: vkgate.TextStream.prefill_all([], a),
        lambda a: model.start(a, 2),
        lambda a: vkgate.Model.load(ctx, a),
        lambda a: vkgate.Model(ctx, mcfg, {"x": a}),
        lambda a: gla.forward(a),
        lambda a: gla.forward(np.zeros((1, 1, 32), np.float32), a),
        lambda a: vkgate.GlaLayer(ctx, a, {}),
        lambda a: vkgate.reference.model_forward(mcfg, {}, a),
        lambda a: vkgate.reference.gla_forward(gcfg, {}, a),
    ]
    for call, arg in itertools.product(calls, junk):
        try:
            call(arg)
        except (vkgate.Error, TypeError):  # TypeError: pybind11 found no overload for the argument types
            pass
    assert block.forward(np.zeros((1, 1, 32), np.float32)).shape == (1, 1, 32)
    assert model.logits([1, 2]).shape == (2, mcfg.vocab_size)
