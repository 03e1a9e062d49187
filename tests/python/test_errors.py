"""User-caused failures raise vkgate.Error with the C++ error code and a
message naming the argument, tensor or key; none aborts the interpreter."""
import types

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


# ---- every entry point given arguments of every wrong kind
#
# Each public function, method and constructor, each argument in turn given
# None, values of the wrong type, ints beyond the C++ type (2**40, 2**64, -1
# where a count is wanted), lone surrogates, ...: always vkgate.Error naming the
# argument, in a short message (no argument's repr, so no array), never
# pybind11's TypeError, an OverflowError or a RuntimeError.

MAX_MESSAGE = 400
HUGE = [2**40, 2**64, -2**70]
NOT_INT = [None, "3", 1.5, True, object()]
BAD = {
    "int": NOT_INT + HUGE + [-1],  # a count or index: -1 refused too
    "any_int": NOT_INT + [2**64],  # any int is an answer (id_to_token(-1) is None)
    "field_int": NOT_INT + HUGE,  # a config field (validate() judges its value)
    "optional_int": ["3", 1.5, True, object(), -1] + HUGE,
    "uint": NOT_INT + [-1, 2**64],
    "bool": [None, 1, "yes", 2**64, object()],
    "typed_int": [None, "3", 1.5, object(), -1] + HUGE,  # pybind11's int (True is 1 there)
    "typed_bool": ["yes", object()],  # pybind11's bool (None and ints are truth values there)
    "number": [None, "1.0", True, 2**2000, object()],
    "optional_number": ["1.0", True, 2**2000, object()],
    "str": [None, 5, b"bytes", "a\ud800b", object()],
    "enum": [None, 5, b"fp32", "a\ud800b", "no such"],
    "path": [None, 5, "a\ud800b", "a\0b", object()],
    "floats": [None, "abc", b"x", {}, True, object(), [[1.0], [2.0, 3.0]]],
    "optional_floats": ["abc", {}, True, object(), [[1.0], [2.0, 3.0]]],
    "ids": [None, "abc", 1.5, [1.5], [2**63], [2**64], [2**70], object(), {}],
    "prompt": [None, 1.5, [1.5], [2**64], object(), {}, "a\ud800b"],
    "ctx": [None, "ctx", 5, object()],
    "config": [None, 5, "config", object()],
    "optional_config": [5, "config", object()],
    "dict": [None, [1], "weights", 5],
    "weights": [None, [1], 5, "a\ud800b"],
    "sequence": [None, 5, object()],
    "sequences": [None, 5, "ab", [None], [5], (object(),), object()],
    "streams": [None, 5, "ab", [None], [5], (object(),), object()],
    "tokenizer": [5, "tokenizer", object()],
    "device": [1.5, True, -1, 2**40, 2**64, "", "a\ud800b", b"x", object()],
    "str_list": [None, 5, "ab", [None], ["a\ud800b"]],
    "int_list": [None, 5, [None], [2**64], ["a"]],
    "stop": [5, b"x", [None], [5], ["a\ud800b"], object()],  # None, a str or a list of str
    "steps": [5, "ab", [None], [0], [2**64], object()],
    "optional_uint": ["3", 1.5, True, object(), -1, 2**64],
}


class Api:
    """One of each object, and valid arguments for every call."""


@pytest.fixture(scope="module")
def api(ctx, tmp_path_factory):
    a = Api()
    rng = np.random.default_rng(5)
    a.ctx = ctx
    a.cfg = tiny_config()
    a.w = block_weights(a.cfg, rng)
    a.block = vkgate.GatedAttention(ctx, a.cfg, a.w)
    a.x = random_x(rng, 1, 2, 32)
    a.kv = np.zeros((1, 2, 3, 8), np.float32)
    a.gcfg = vkgate.GlaConfig(hidden_size=32, num_heads=2, num_kv_heads=2)
    a.gw = {k: (0.1 * rng.standard_normal(s)).astype(np.float32) for k, s in vkgate.gla_expected_weights(a.gcfg).items()}
    a.gla = vkgate.GlaLayer(ctx, a.gcfg, a.gw)
    a.dcfg = vkgate.GdnConfig(hidden_size=32, num_key_heads=2, num_value_heads=2, key_head_dim=8, value_head_dim=8)
    a.dw = {k: (0.1 * rng.standard_normal(s)).astype(np.float32) for k, s in vkgate.gdn_expected_weights(a.dcfg).items()}
    a.gdn = vkgate.GatedDeltaNet(ctx, a.dcfg, a.dw)
    a.dir = tmp_path_factory.mktemp("model")
    a.mcfg, a.mw = write_model(a.dir, rng)
    a.model = vkgate.Model.load(ctx, a.dir)
    a.seq = a.model.start(1, 8)
    a.tok = vkgate.Tokenizer(a.dir / "tokenizer.json")
    a.tok_json = (a.dir / "tokenizer.json").read_text()
    return a


def f32(*shape):
    return np.zeros(shape, np.float32)


# (entry point, argument, kind, call(api, value))
CALLS = [
    ("Context", "device", "device", lambda a, v: vkgate.Context(device=v)),
    ("Context", "validation", "bool", lambda a, v: vkgate.Context(validation=v)),
    ("Context", "device_memory_limit", "uint", lambda a, v: vkgate.Context(device_memory_limit=v)),
    ("load_config", "path", "path", lambda a, v: vkgate.load_config(v)),
    ("parse_config_json", "json_text", "str", lambda a, v: vkgate.parse_config_json(v)),
    ("parse_config_json", "source", "str", lambda a, v: vkgate.parse_config_json("{}", v)),
    ("expected_weights", "config", "config", lambda a, v: vkgate.expected_weights(v)),
    ("load_gla_config", "path", "path", lambda a, v: vkgate.load_gla_config(v)),
    ("parse_gla_config_json", "json_text", "str", lambda a, v: vkgate.parse_gla_config_json(v)),
    ("parse_gla_config_json", "source", "str", lambda a, v: vkgate.parse_gla_config_json("{}", v)),
    ("gla_expected_weights", "config", "config", lambda a, v: vkgate.gla_expected_weights(v)),
    ("gla_expected_weights", "low_rank_dim", "int", lambda a, v: vkgate.gla_expected_weights(a.gcfg, v)),
    ("gla_expected_weights", "output_norm", "str", lambda a, v: vkgate.gla_expected_weights(a.gcfg, output_norm=v)),
    ("gla_expected_weights", "attn_norm", "bool", lambda a, v: vkgate.gla_expected_weights(a.gcfg, attn_norm=v)),
    ("load_gdn_config", "path", "path", lambda a, v: vkgate.load_gdn_config(v)),
    ("parse_gdn_config_json", "json_text", "str", lambda a, v: vkgate.parse_gdn_config_json(v)),
    ("parse_gdn_config_json", "source", "str", lambda a, v: vkgate.parse_gdn_config_json("{}", v)),
    ("gdn_expected_weights", "config", "config", lambda a, v: vkgate.gdn_expected_weights(v)),
    ("load_model_config", "dir", "path", lambda a, v: vkgate.load_model_config(v)),
    ("parse_model_config_json", "json_text", "str", lambda a, v: vkgate.parse_model_config_json(v)),
    ("parse_model_config_json", "source", "str", lambda a, v: vkgate.parse_model_config_json("{}", v)),
    ("expected_model_weights", "config", "config", lambda a, v: vkgate.expected_model_weights(v)),
    ("BlockConfig.check_layer", "layer", "int", lambda a, v: a.cfg.check_layer(v)),
    ("GatedAttention", "ctx", "ctx", lambda a, v: vkgate.GatedAttention(v, a.cfg, a.w)),
    ("GatedAttention", "config", "optional_config", lambda a, v: vkgate.GatedAttention(a.ctx, v, a.w)),
    ("GatedAttention", "weights", "weights", lambda a, v: vkgate.GatedAttention(a.ctx, a.cfg, v)),
    ("GatedAttention", "layer", "optional_int", lambda a, v: vkgate.GatedAttention(a.ctx, a.cfg, a.w, layer=v)),
    ("GatedAttention", "precision", "enum", lambda a, v: vkgate.GatedAttention(a.ctx, a.cfg, a.w, precision=v)),
    ("GatedAttention", "check_finite", "bool", lambda a, v: vkgate.GatedAttention(a.ctx, a.cfg, a.w, check_finite=v)),
    ("GatedAttention.forward", "x", "floats", lambda a, v: a.block.forward(v)),
    ("GatedAttention.forward", "past_key", "floats", lambda a, v: a.block.forward(a.x, v, a.kv)),
    ("GatedAttention.forward", "past_value", "floats", lambda a, v: a.block.forward(a.x, a.kv, v)),
    ("GatedAttention.forward", "attention_mask", "optional_floats",
     lambda a, v: a.block.forward(a.x, attention_mask=v)),
    ("GatedAttention.forward", "stats", "bool", lambda a, v: a.block.forward(a.x, stats=v)),
    ("GatedAttention.forward", "return_cache", "bool", lambda a, v: a.block.forward(a.x, return_cache=v)),
    ("GatedAttention.forward", "use_device_cache", "bool", lambda a, v: a.block.forward(a.x, use_device_cache=v)),
    ("GatedAttention.reserve_cache", "batch", "int", lambda a, v: a.block.reserve_cache(v, 4)),
    ("GatedAttention.reserve_cache", "capacity", "int", lambda a, v: a.block.reserve_cache(1, v)),
    ("GatedAttention.load_cache", "key", "floats", lambda a, v: a.block.load_cache(v, a.kv)),
    ("GatedAttention.load_cache", "value", "floats", lambda a, v: a.block.load_cache(a.kv, v)),
    ("GatedAttention.load_cache", "capacity", "optional_int", lambda a, v: a.block.load_cache(a.kv, a.kv, v)),
    ("GatedAttention.truncate_cache", "length", "int", lambda a, v: a.block.truncate_cache(v)),
    ("GatedAttention.set_poison", "on", "bool", lambda a, v: a.block.set_poison(v)),
    ("GlaLayer", "ctx", "ctx", lambda a, v: vkgate.GlaLayer(v, a.gcfg, a.gw)),
    ("GlaLayer", "config", "optional_config", lambda a, v: vkgate.GlaLayer(a.ctx, v, a.gw)),
    ("GlaLayer", "weights", "weights", lambda a, v: vkgate.GlaLayer(a.ctx, a.gcfg, v)),
    ("GlaLayer", "precision", "enum", lambda a, v: vkgate.GlaLayer(a.ctx, a.gcfg, a.gw, precision=v)),
    ("GlaLayer", "check_finite", "bool", lambda a, v: vkgate.GlaLayer(a.ctx, a.gcfg, a.gw, check_finite=v)),
    ("GlaLayer.forward", "x", "floats", lambda a, v: a.gla.forward(v)),
    ("GlaLayer.forward", "initial_state", "optional_floats", lambda a, v: a.gla.forward(a.x, v)),
    ("GlaLayer.set_poison", "on", "bool", lambda a, v: a.gla.set_poison(v)),
    ("GatedDeltaNet", "ctx", "ctx", lambda a, v: vkgate.GatedDeltaNet(v, a.dcfg, a.dw)),
    ("GatedDeltaNet", "config", "optional_config", lambda a, v: vkgate.GatedDeltaNet(a.ctx, v, a.dw)),
    ("GatedDeltaNet", "weights", "weights", lambda a, v: vkgate.GatedDeltaNet(a.ctx, a.dcfg, v)),
    ("GatedDeltaNet", "precision", "enum", lambda a, v: vkgate.GatedDeltaNet(a.ctx, a.dcfg, a.dw, precision=v)),
    ("GatedDeltaNet", "check_finite", "bool",
     lambda a, v: vkgate.GatedDeltaNet(a.ctx, a.dcfg, a.dw, check_finite=v)),
    ("GatedDeltaNet.forward", "x", "floats", lambda a, v: a.gdn.forward(v)),
    ("GatedDeltaNet.forward", "conv_state", "optional_floats", lambda a, v: a.gdn.forward(a.x, v)),
    ("GatedDeltaNet.forward", "initial_state", "optional_floats", lambda a, v: a.gdn.forward(a.x, None, v)),
    ("GatedDeltaNet.chunked", "tokens", "int", lambda a, v: a.gdn.chunked(v)),
    ("GatedDeltaNet.set_poison", "on", "bool", lambda a, v: a.gdn.set_poison(v)),
    ("Model.load", "ctx", "ctx", lambda a, v: vkgate.Model.load(v, a.dir)),
    ("Model.load", "dir", "path", lambda a, v: vkgate.Model.load(a.ctx, v)),
    ("Model.load", "precision", "enum", lambda a, v: vkgate.Model.load(a.ctx, a.dir, precision=v)),
    ("Model.load", "check_finite", "bool", lambda a, v: vkgate.Model.load(a.ctx, a.dir, check_finite=v)),
    ("Model.load", "ignore_context_limit", "bool",
     lambda a, v: vkgate.Model.load(a.ctx, a.dir, ignore_context_limit=v)),
    ("Model", "ignore_context_limit", "bool", lambda a, v: vkgate.Model(a.ctx, a.mcfg, a.mw, ignore_context_limit=v)),
    ("Model", "ctx", "ctx", lambda a, v: vkgate.Model(v, a.mcfg, a.mw)),
    ("Model", "config", "config", lambda a, v: vkgate.Model(a.ctx, v, a.mw)),
    ("Model", "weights", "dict", lambda a, v: vkgate.Model(a.ctx, a.mcfg, v)),
    ("Model", "precision", "enum", lambda a, v: vkgate.Model(a.ctx, a.mcfg, a.mw, precision=v)),
    ("Model", "check_finite", "bool", lambda a, v: vkgate.Model(a.ctx, a.mcfg, a.mw, check_finite=v)),
    ("Model.logits", "ids", "ids", lambda a, v: a.model.logits(v)),
    ("Model.logits", "stats", "bool", lambda a, v: a.model.logits([1], stats=v)),
    ("Model.generate", "prompt", "prompt", lambda a, v: a.model.generate(v, 1)),
    ("Model.generate", "max_new_tokens", "int", lambda a, v: a.model.generate([1], v)),
    ("Model.generate", "stop_at_eos", "bool", lambda a, v: a.model.generate([1], 1, v)),
    ("Model.generate", "tokenizer", "tokenizer", lambda a, v: a.model.generate("hi", 1, tokenizer=v)),
    ("Model.generate", "temperature", "number", lambda a, v: a.model.generate([1], 1, temperature=v)),
    ("Model.generate", "top_k", "int", lambda a, v: a.model.generate([1], 1, top_k=v)),
    ("Model.generate", "top_p", "number", lambda a, v: a.model.generate([1], 1, top_p=v)),
    ("Model.generate", "min_p", "number", lambda a, v: a.model.generate([1], 1, min_p=v)),
    ("Model.generate", "repeat_penalty", "number", lambda a, v: a.model.generate([1], 1, repeat_penalty=v)),
    ("Model.generate", "repeat_last_n", "field_int", lambda a, v: a.model.generate([1], 1, repeat_last_n=v)),
    ("Model.generate", "presence_penalty", "number", lambda a, v: a.model.generate([1], 1, presence_penalty=v)),
    ("Model.generate", "frequency_penalty", "number", lambda a, v: a.model.generate([1], 1, frequency_penalty=v)),
    ("Model.generate", "seed", "optional_uint", lambda a, v: a.model.generate([1], 1, seed=v)),
    ("Model.generate", "stop", "stop", lambda a, v: a.model.generate("hi", 1, stop=v)),
    ("Model.start", "batch", "int", lambda a, v: a.model.start(v, 4)),
    ("Model.start", "capacity", "int", lambda a, v: a.model.start(1, v)),
    ("Model.extend", "sequence", "sequence", lambda a, v: a.model.extend(v, [1])),
    ("Model.extend", "ids", "ids", lambda a, v: a.model.extend(a.seq, v)),
    ("Model.extend_together", "sequences", "sequences", lambda a, v: a.model.extend_together(v, [1])),
    ("Model.extend_together", "ids", "ids", lambda a, v: a.model.extend_together([a.seq], v)),
    ("Model.extend_top", "sequences", "sequences", lambda a, v: a.model.extend_top(v, [1], 2)),
    ("Model.extend_top", "ids", "ids", lambda a, v: a.model.extend_top([a.seq], v, 2)),
    ("Model.extend_top", "k", "int", lambda a, v: a.model.extend_top([a.seq], [1], v)),
    ("Model.set_poison", "on", "bool", lambda a, v: a.model.set_poison(v)),
    ("Sequence.truncate", "length", "int", lambda a, v: a.seq.truncate(v)),
    ("Sequence.rollback_length", "at_most", "int", lambda a, v: a.seq.rollback_length(v)),
    ("Sequence.reserve", "capacity", "int", lambda a, v: a.seq.reserve(v)),
    ("TextStream.step_all", "streams", "streams", lambda a, v: vkgate.TextStream.step_all(v)),
    ("TextStream.prefill_all", "streams", "streams", lambda a, v: vkgate.TextStream.prefill_all(v, 1)),
    ("TextStream.prefill_all", "tokens", "int",
     lambda a, v: vkgate.TextStream.prefill_all([a.model.generate("hi", max_new_tokens=1)], v)),
    ("Tokenizer", "path", "path", lambda a, v: vkgate.Tokenizer(v)),
    ("Tokenizer.from_json", "json_text", "str", lambda a, v: vkgate.Tokenizer.from_json(v)),
    ("Tokenizer.from_json", "source", "str", lambda a, v: vkgate.Tokenizer.from_json(a.tok_json, v)),
    ("Tokenizer.encode", "text", "str", lambda a, v: a.tok.encode(v)),
    ("Tokenizer.encode", "add_special_tokens", "bool", lambda a, v: a.tok.encode("a", v)),
    ("Tokenizer.decode", "ids", "ids", lambda a, v: a.tok.decode(v)),
    ("Tokenizer.normalize", "text", "str", lambda a, v: a.tok.normalize(v)),
    ("Tokenizer.token_to_id", "token", "str", lambda a, v: a.tok.token_to_id(v)),
    ("Tokenizer.id_to_token", "id", "any_int", lambda a, v: a.tok.id_to_token(v)),
    ("Tokenizer.is_special", "id", "any_int", lambda a, v: a.tok.is_special(v)),
    ("reference.linear", "x", "floats", lambda a, v: vkgate.reference.linear(v, f32(4, 3))),
    ("reference.linear", "w", "floats", lambda a, v: vkgate.reference.linear(f32(2, 3), v)),
    ("reference.linear", "b", "optional_floats", lambda a, v: vkgate.reference.linear(f32(2, 3), f32(4, 3), v)),
    ("reference.rms_norm", "x", "floats", lambda a, v: vkgate.reference.rms_norm(v, f32(4))),
    ("reference.rms_norm", "w", "floats", lambda a, v: vkgate.reference.rms_norm(f32(2, 4), v)),
    ("reference.rms_norm", "eps", "number", lambda a, v: vkgate.reference.rms_norm(f32(2, 4), f32(4), v)),
    ("reference.rms_norm", "kind", "enum", lambda a, v: vkgate.reference.rms_norm(f32(2, 4), f32(4), kind=v)),
    ("reference.rope", "x", "floats", lambda a, v: vkgate.reference.rope(v, 4)),
    ("reference.rope", "rotary_dim", "int", lambda a, v: vkgate.reference.rope(f32(1, 2, 1, 4), v)),
    ("reference.rope", "theta", "number", lambda a, v: vkgate.reference.rope(f32(1, 2, 1, 4), 4, v)),
    ("reference.rope", "pos0", "int", lambda a, v: vkgate.reference.rope(f32(1, 2, 1, 4), 4, pos0=v)),
    ("reference.rope", "style", "enum", lambda a, v: vkgate.reference.rope(f32(1, 2, 1, 4), 4, style=v)),
    ("reference.softmax", "scores", "floats", lambda a, v: vkgate.reference.softmax(v)),
    ("reference.softmax", "scale", "number", lambda a, v: vkgate.reference.softmax(f32(1, 1, 2, 2), v)),
    ("reference.softmax", "causal", "bool", lambda a, v: vkgate.reference.softmax(f32(1, 1, 2, 2), causal=v)),
    ("reference.softmax", "mask", "optional_floats", lambda a, v: vkgate.reference.softmax(f32(1, 1, 2, 2), mask=v)),
    ("reference.attention", "q", "floats", lambda a, v: vkgate.reference.attention(v, f32(1, 1, 2, 4), f32(1, 1, 2, 4), 0.5)),
    ("reference.attention", "k", "floats", lambda a, v: vkgate.reference.attention(f32(1, 2, 2, 4), v, f32(1, 1, 2, 4), 0.5)),
    ("reference.attention", "v", "floats", lambda a, v: vkgate.reference.attention(f32(1, 2, 2, 4), f32(1, 1, 2, 4), v, 0.5)),
    ("reference.attention", "scale", "number",
     lambda a, v: vkgate.reference.attention(f32(1, 2, 2, 4), f32(1, 1, 2, 4), f32(1, 1, 2, 4), v)),
    ("reference.attention", "causal", "bool",
     lambda a, v: vkgate.reference.attention(f32(1, 2, 2, 4), f32(1, 1, 2, 4), f32(1, 1, 2, 4), 0.5, v)),
    ("reference.attention", "mask", "optional_floats",
     lambda a, v: vkgate.reference.attention(f32(1, 2, 2, 4), f32(1, 1, 2, 4), f32(1, 1, 2, 4), 0.5, mask=v)),
    ("reference.attention", "mapping", "enum",
     lambda a, v: vkgate.reference.attention(f32(1, 2, 2, 4), f32(1, 1, 2, 4), f32(1, 1, 2, 4), 0.5, mapping=v)),
    ("reference.gate", "y", "floats", lambda a, v: vkgate.reference.gate(v, f32(2, 2), 2, 1)),
    ("reference.gate", "g", "floats", lambda a, v: vkgate.reference.gate(f32(2, 4), v, 2, 1)),
    ("reference.gate", "heads", "int", lambda a, v: vkgate.reference.gate(f32(2, 4), f32(2, 2), v, 1)),
    ("reference.gate", "gate_width", "int", lambda a, v: vkgate.reference.gate(f32(2, 4), f32(2, 2), 2, v)),
    ("reference.gate", "activation", "enum", lambda a, v: vkgate.reference.gate(f32(2, 4), f32(2, 2), 2, 1, v)),
    ("reference.gate", "combine", "enum", lambda a, v: vkgate.reference.gate(f32(2, 4), f32(2, 2), 2, 1, combine=v)),
    ("reference.compare", "got", "floats", lambda a, v: vkgate.reference.compare(v, np.zeros(3))),
    ("reference.compare", "want", "floats", lambda a, v: vkgate.reference.compare(f32(3), v)),
    ("reference.forward", "config", "config", lambda a, v: vkgate.reference.forward(v, a.w, a.x)),
    ("reference.forward", "weights", "dict", lambda a, v: vkgate.reference.forward(a.cfg, v, a.x)),
    ("reference.forward", "x", "floats", lambda a, v: vkgate.reference.forward(a.cfg, a.w, v)),
    ("reference.forward", "past_key", "floats", lambda a, v: vkgate.reference.forward(a.cfg, a.w, a.x, v, a.kv)),
    ("reference.forward", "past_value", "floats", lambda a, v: vkgate.reference.forward(a.cfg, a.w, a.x, a.kv, v)),
    ("reference.forward", "attention_mask", "optional_floats",
     lambda a, v: vkgate.reference.forward(a.cfg, a.w, a.x, attention_mask=v)),
    ("reference.model_forward", "config", "config", lambda a, v: vkgate.reference.model_forward(v, a.mw, [[1]])),
    ("reference.model_forward", "weights", "dict", lambda a, v: vkgate.reference.model_forward(a.mcfg, v, [[1]])),
    ("reference.model_forward", "ids", "ids", lambda a, v: vkgate.reference.model_forward(a.mcfg, a.mw, v)),
    ("reference.model_forward", "steps", "steps", lambda a, v: vkgate.reference.model_forward(a.mcfg, a.mw, [[1]], v)),
    ("reference.rope_frequencies", "config", "config", lambda a, v: vkgate.reference.rope_frequencies(v, 4)),
    ("reference.rope_frequencies", "seq_len", "int", lambda a, v: vkgate.reference.rope_frequencies(a.cfg, v)),
    ("reference.greedy_generate", "config", "config", lambda a, v: vkgate.reference.greedy_generate(v, a.mw, [1], 1)),
    ("reference.greedy_generate", "weights", "dict", lambda a, v: vkgate.reference.greedy_generate(a.mcfg, v, [1], 1)),
    ("reference.greedy_generate", "prompt", "ids", lambda a, v: vkgate.reference.greedy_generate(a.mcfg, a.mw, v, 1)),
    ("reference.greedy_generate", "max_new_tokens", "int",
     lambda a, v: vkgate.reference.greedy_generate(a.mcfg, a.mw, [1], v)),
    ("reference.greedy_generate", "stop_at_eos", "bool",
     lambda a, v: vkgate.reference.greedy_generate(a.mcfg, a.mw, [1], 1, v)),
    ("reference.mlp", "x", "floats", lambda a, v: vkgate.reference.mlp(v, "silu", f32(3, 4), f32(3, 4), f32(4, 3))),
    ("reference.mlp", "act", "enum", lambda a, v: vkgate.reference.mlp(np.zeros((2, 4)), v, f32(3, 4), f32(3, 4), f32(4, 3))),
    ("reference.mlp", "gate_w", "floats",
     lambda a, v: vkgate.reference.mlp(np.zeros((2, 4)), "silu", v, f32(3, 4), f32(4, 3))),
    ("reference.mlp", "up_w", "floats", lambda a, v: vkgate.reference.mlp(np.zeros((2, 4)), "silu", f32(3, 4), v, f32(4, 3))),
    ("reference.mlp", "down_w", "floats",
     lambda a, v: vkgate.reference.mlp(np.zeros((2, 4)), "silu", f32(3, 4), f32(3, 4), v)),
    ("reference.gla_forward", "config", "config", lambda a, v: vkgate.reference.gla_forward(v, a.gw, a.x)),
    ("reference.gla_forward", "weights", "dict", lambda a, v: vkgate.reference.gla_forward(a.gcfg, v, a.x)),
    ("reference.gla_forward", "x", "floats", lambda a, v: vkgate.reference.gla_forward(a.gcfg, a.gw, v)),
    ("reference.gla_forward", "initial_state", "optional_floats",
     lambda a, v: vkgate.reference.gla_forward(a.gcfg, a.gw, a.x, v)),
    ("reference.gla_forward", "keep_states", "bool", lambda a, v: vkgate.reference.gla_forward(a.gcfg, a.gw, a.x, None, v)),
    ("MoeConfig.sparse", "layer", "int", lambda a, v: vkgate.MoeConfig().sparse(v)),
    ("reference.gdn_forward", "config", "config", lambda a, v: vkgate.reference.gdn_forward(v, a.dw, a.x)),
    ("reference.gdn_forward", "weights", "dict", lambda a, v: vkgate.reference.gdn_forward(a.dcfg, v, a.x)),
    ("reference.gdn_forward", "x", "floats", lambda a, v: vkgate.reference.gdn_forward(a.dcfg, a.dw, v)),
    ("reference.gdn_forward", "conv_state", "optional_floats",
     lambda a, v: vkgate.reference.gdn_forward(a.dcfg, a.dw, a.x, v)),
    ("reference.gdn_forward", "initial_state", "optional_floats",
     lambda a, v: vkgate.reference.gdn_forward(a.dcfg, a.dw, a.x, None, v)),
]


def field_kind(value, name):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "field_int"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (vkgate.BlockConfig, vkgate.MoeConfig)):
        return "config"
    if name in ("eos_token_ids", "mlp_only_layers"):
        return "int_list"
    if isinstance(value, list):
        return "str_list"
    return "optional_config" if name in ("gla", "linear_attention") else "optional_number"


def config_calls():
    """Every field of every config, as a keyword of the constructor and as an attribute."""
    calls = []
    for cls in (vkgate.BlockConfig, vkgate.GlaConfig, vkgate.GdnConfig, vkgate.MoeConfig, vkgate.ModelConfig,
                vkgate.RopeScaling):
        for name in cls.FIELDS:
            kind = field_kind(getattr(cls(), name), name)
            calls.append((cls.__name__, name, kind, lambda a, v, cls=cls, name=name: cls(**{name: v})))
            calls.append((cls.__name__ + "." + name, name, kind, lambda a, v, cls=cls, name=name: setattr(cls(), name, v)))
    return calls


def short(v):
    return ascii(v)[:20]


def check_refused(call, api, value, entry, argument):
    try:
        call(api, value)
    except vkgate.Error as e:
        message = str(e)
        where = "%s(%s=%s)" % (entry, argument, short(value))
        assert e.code in ("invalid_argument", "invalid_config", "shape_mismatch"), "%s: %s: %s" % (where, e.code, e)
        assert argument in message, "%s: the message does not name %r: %s" % (where, argument, message)
        assert len(message) <= MAX_MESSAGE and "array(" not in message and "Invoked with" not in message, \
            "%s: %d characters: %s" % (where, len(message), message[:MAX_MESSAGE])
        return
    except BaseException as e:
        pytest.fail("%s(%s=%s) raised %s, not vkgate.Error: %s" % (entry, argument, short(value), type(e).__name__,
                                                                  str(e)[:300]))
    pytest.fail("%s(%s=%s) was accepted" % (entry, argument, short(value)))


@pytest.mark.parametrize("entry, argument, kind, call", CALLS + config_calls(),
                         ids=["%s-%s" % (c[0], c[1]) for c in CALLS + config_calls()])
def test_every_argument_refuses_every_wrong_kind(api, entry, argument, kind, call):
    for value in BAD[kind]:
        check_refused(call, api, value, entry, argument)
    # and the objects still work
    assert api.block.forward(api.x).shape == (1, 2, 32)
    assert api.model.logits([1, 2]).shape == (2, api.mcfg.vocab_size)


# Entry points without arguments (besides self).
NO_ARGUMENTS = {
    "devices", "Context.take_validation_messages", "BlockConfig.validate", "BlockConfig.copy",
    "BlockConfig.qwen3_next_attention", "GlaConfig.validate", "GlaConfig.copy", "GdnConfig.validate",
    "GdnConfig.copy", "GdnConfig.qwen3_next", "MoeConfig.copy", "ModelConfig.validate", "ModelConfig.moe_layers",
    "ModelConfig.copy", "RopeScaling.copy", "GatedAttention.last_timings", "Model.last_timings",
    "Sequence.checkpoint",
}


def public_callables():
    """{name: callable} of every public function, method, static method and constructor."""
    found = {}
    for module, prefix in ((vkgate, ""), (vkgate.reference, "reference.")):
        for name, value in vars(module).items():
            if name.startswith("_"):
                continue
            if isinstance(value, type):
                if issubclass(value, BaseException):
                    continue
                for attr, member in vars(value).items():
                    if attr == "__init__":
                        if not isinstance(member, types.WrapperDescriptorType):  # Sequence, TextStream: none
                            found[name] = value
                    elif not attr.startswith("_") and (callable(member) or isinstance(member, staticmethod)):
                        found[name + "." + attr] = member
            elif callable(value):
                found[prefix + name] = value
    return found


def test_every_entry_point_is_checked():
    covered = {c[0] for c in CALLS + config_calls()} | NO_ARGUMENTS
    missing = sorted(set(public_callables()) - covered)
    assert not missing, "entry points without argument checks in CALLS: %s" % missing


def bound(api, name):
    """The callable `name` of public_callables(), bound to one of api's objects."""
    objects = {"Context": api.ctx, "BlockConfig": api.cfg, "GlaConfig": api.gcfg, "GdnConfig": api.dcfg,
               "ModelConfig": api.mcfg, "GatedAttention": api.block, "GlaLayer": api.gla, "GatedDeltaNet": api.gdn, "Model": api.model, "Sequence": api.seq,
               "Tokenizer": api.tok, "RopeScaling": vkgate.RopeScaling(), "MoeConfig": vkgate.MoeConfig(),
               "TextStream": vkgate.TextStream}
    if name.startswith("reference."):
        return getattr(vkgate.reference, name.split(".")[1])
    owner, _, attr = name.partition(".")
    if not attr:
        return getattr(vkgate, owner)
    return getattr(objects[owner], attr)


def test_unknown_and_surplus_arguments(api):
    """pybind11 refuses a call that fits no signature with a TypeError listing the repr of every
    argument (a weights dict's arrays included): here a vkgate.Error names what is wrong."""
    for name in sorted(public_callables()):
        f = bound(api, name)
        with pytest.raises(vkgate.Error) as info:
            f(bogus_argument=1)
        message = str(info.value)
        assert "bogus_argument" in message and len(message) <= MAX_MESSAGE, "%s: %s" % (name, message)
        if name in NO_ARGUMENTS:
            with raises("invalid_argument", "takes no positional arguments"):
                f(1)
    with raises("invalid_argument", "missing argument 'weights'", "GatedAttention(ctx, config, weights, layer=None"):
        vkgate.GatedAttention(api.ctx, api.cfg)
    with raises("invalid_argument", "no argument named 'precison'"):
        vkgate.GatedAttention(api.ctx, api.cfg, api.w, precison="fp16")
    with raises("invalid_argument", "takes at most 6 arguments, got 7"):
        vkgate.GatedAttention(api.ctx, api.cfg, api.w, None, "fp32", True, 1)
    with raises("invalid_argument", "'x' given twice"):
        api.block.forward(api.x, x=api.x)
    with raises("invalid_argument", "self: expected a vkgate.Model, got None"):
        vkgate.Model.logits(None, [1])
    # and the messages of the original issue
    with raises("invalid_argument", "ctx: expected a vkgate.Context, got None"):
        vkgate.GatedAttention(None, api.cfg, api.w)
    with raises("invalid_argument", "capacity: 1099511627776 is out of range"):
        api.model.start(1, 2**40)
    with raises("invalid_argument", "text: expected a str, got None"):
        api.tok.encode(None)
    with raises("invalid_argument", "text: the character at index 1 is a lone surrogate (U+D800)"):
        api.tok.encode("a\ud800b")
    with raises("invalid_config", "BlockConfig.hidden_size: 1099511627776 is out of range"):
        vkgate.BlockConfig(hidden_size=2**40)
    with raises("invalid_argument", "x: expected a float32 numpy array, got None"):
        api.block.forward(None)


def test_help_keeps_types_and_docs():
    assert "start(self: vkgate.Model, batch: int, capacity: int) -> vkgate.Sequence" in vkgate.Model.start.__doc__
    doc = vkgate.GatedAttention.__init__.__doc__
    assert "ctx: vkgate.Context" in doc and "precision: str = 'fp32'" in doc
    assert vkgate.GatedAttention.__init__.__name__ == "__init__"
    assert "every tensor the block needs" in vkgate.expected_weights.__doc__
    assert "in double" in vkgate.reference.linear.__doc__
