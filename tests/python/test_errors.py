"""User-caused failures raise vkgate.Error with the C++ error code and a
message naming the argument, tensor or key; none aborts the interpreter."""
import numpy as np
import pytest

import vkgate
from conftest import block_weights, random_x, tiny_config, write_model


def raises(code, *fragments):
    class Check:
        def __enter__(self):
            self.ctx = pytest.raises(vkgate.Error)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.ctx.__exit__(*exc)
            e = self.info.value
            assert e.code == code, "code %r, want %r: %s" % (e.code, code, e)
            for f in fragments:
                assert f in str(e), "%r not in %r" % (f, str(e))
            assert e.message == str(e) and e.vk_result == 0
            return handled
    return Check()


def test_error_class():
    assert issubclass(vkgate.Error, Exception)
    assert "shape_mismatch" in vkgate.ERROR_CODES and len(vkgate.ERROR_CODES) == 12


def test_device_selection_matching_nothing():
    with raises("no_device", "no such device"):
        vkgate.Context(device="no such device")
    with raises("no_device"):
        vkgate.Context(device=99)
    with raises("invalid_argument", "device"):
        vkgate.Context(device="")


@pytest.fixture
def block(ctx, rng):
    cfg = tiny_config()
    return vkgate.GatedAttention(ctx, cfg, block_weights(cfg, rng))


def test_wrong_inputs(block, rng):
    x = random_x(rng, 1, 3, 32)
    with raises("invalid_argument", "x", "float64"):
        block.forward(x.astype(np.float64))
    with raises("invalid_argument", "x", "int64"):
        block.forward(np.zeros((1, 3, 32), np.int64))
    with raises("shape_mismatch", "x", "3-D"):
        block.forward(x[0])
    with raises("shape_mismatch", "x", "[1, 3, 31]"):
        block.forward(x[:, :, :31])
    with raises("invalid_argument", "x"):
        block.forward("not an array")
    with raises("invalid_argument", "past_key, past_value"):
        block.forward(x, past_key=np.zeros((1, 2, 4, 8), np.float32))
    with raises("shape_mismatch", "past_value"):
        block.forward(x, np.zeros((1, 2, 4, 8), np.float32), np.zeros((1, 2, 5, 8), np.float32))
    with raises("shape_mismatch", "attention_mask"):
        block.forward(x, attention_mask=np.zeros((1, 1, 3, 4), np.float32))
    with raises("non_finite"):
        block.forward(np.full((1, 3, 32), np.nan, np.float32))
    with raises("invalid_argument", "use_device_cache"):
        block.forward(x, use_device_cache=True)
    with raises("invalid_argument", "truncate_cache"):
        block.truncate_cache(5)
    # the block is still usable
    assert block.forward(x).shape == (1, 3, 32)


def test_bad_weights(ctx, rng):
    cfg = tiny_config()
    w = block_weights(cfg, rng)
    missing = dict(w)
    del missing["o_proj.weight"]
    with raises("missing_tensor", "o_proj.weight"):
        vkgate.GatedAttention(ctx, cfg, missing)
    bad = dict(w, **{"k_proj.weight": w["k_proj.weight"][:8]})
    with raises("shape_mismatch", "k_proj.weight"):
        vkgate.GatedAttention(ctx, cfg, bad)
    with raises("invalid_argument", "weights['q_proj.weight']", "float64"):
        vkgate.GatedAttention(ctx, cfg, dict(w, **{"q_proj.weight": w["q_proj.weight"].astype(np.float64)}))
    with raises("invalid_argument", "weights"):
        vkgate.GatedAttention(ctx, cfg, {1: w["q_proj.weight"]})
    with raises("invalid_argument", "precision", "fp8"):
        vkgate.GatedAttention(ctx, cfg, w, precision="fp8")
    with raises("invalid_config", "BlockConfig.gate_kind", "'sometimes'"):
        cfg.gate_kind = "sometimes"
    with raises("invalid_config", "no field 'hidden'"):
        vkgate.BlockConfig(hidden=3)
    with raises("invalid_config"):
        vkgate.GatedAttention(ctx, tiny_config(num_kv_heads=3), w)
    with raises("io", "nowhere"):
        vkgate.GatedAttention(ctx, cfg, "/nowhere/block.safetensors")
    with raises("invalid_argument", "weights"):
        vkgate.GatedAttention(ctx, cfg, 42)
    with raises("invalid_argument", "layer"):
        vkgate.GatedAttention(ctx, cfg, w, layer=0)


def test_model_errors(ctx, tmp_path):
    cfg, _ = write_model(tmp_path, np.random.default_rng(1), with_tokenizer=False)
    model = vkgate.Model.load(ctx, tmp_path)
    with raises("invalid_argument", str(cfg.vocab_size)):
        model.logits([1, 2, cfg.vocab_size])
    with raises("invalid_argument"):
        model.logits([-1])
    with raises("invalid_argument", "ids", "float"):
        model.logits(np.array([1.0, 2.0]))
    with raises("invalid_argument", "string"):
        model.logits("hello")
    with raises("shape_mismatch", "ids"):
        model.logits(np.zeros((1, 1, 2), np.int64))
    with raises("invalid_argument", "max_new_tokens"):
        model.generate([1], max_new_tokens=-1)
    other = vkgate.Model.load(ctx, tmp_path)
    seq = other.start(1, 2)
    with raises("invalid_argument", "another model"):
        model.extend(seq, [1])
    with raises("invalid_argument", "do not fit"):
        other.extend(seq, [1, 2, 3])
    with raises("shape_mismatch", "ids"):
        other.extend(seq, [[1], [2]])
    with raises("io", "nowhere"):
        vkgate.Model.load(ctx, "/nowhere")
    with raises("invalid_config", "hidden_size"):
        (tmp_path / "config.json").write_text('{"model_type": "qwen3", "hidden_size": "big"}')
        vkgate.Model.load(ctx, tmp_path)


def test_reference_errors(rng):
    cfg = tiny_config()
    w = block_weights(cfg, rng)
    with raises("missing_tensor", "v_proj.weight"):
        vkgate.reference.forward(cfg, {k: v for k, v in w.items() if k != "v_proj.weight"}, random_x(rng, 1, 2, 32))
    with raises("shape_mismatch", "w"):
        vkgate.reference.linear(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32))
    with raises("shape_mismatch", "got, want"):
        vkgate.reference.compare(np.zeros(3, np.float32), np.zeros(4))
