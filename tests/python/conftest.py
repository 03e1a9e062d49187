"""Shared by the Python tests: one validated Context per process, random
weights, a safetensors writer and tiny model directories.

Every test that touches the device runs under VK_LAYER_KHRONOS_validation with
synchronization validation, as the C++ tests do (tests/harness.hpp): the
session's Context is made with validation=True and a test fails when the layer
reported anything while it ran. VKGATE_TEST_DEVICE picks the device.
"""
import json
import os
import struct
import zlib

import numpy as np
import pytest

import vkgate

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOKENIZER_JSON = os.path.join(REPO, "tests", "tokenizer", "unit", "qwen_style.json")

# The C++ tests' bounds (tests/test_block.cpp, tests/test_model.cpp).
NMSE_FP32 = 1e-9
NMSE_MODEL_FP32 = 1e-8
NMSE_BLOCK = {"fp32": 1e-9, "fp16": 1e-5, "bf16": 1e-4}


@pytest.fixture(scope="session")
def ctx():
    c = vkgate.Context(device=os.environ.get("VKGATE_TEST_DEVICE") or None, validation=True)
    assert c.validation_enabled
    return c


@pytest.fixture(autouse=True)
def no_validation_messages(ctx):
    ctx.take_validation_messages()
    yield
    messages = ctx.take_validation_messages()
    assert not messages, "the validation layer reported %d message(s):\n%s" % (len(messages), "\n".join(messages))


@pytest.fixture
def rng(request):
    seed = zlib.crc32(request.node.nodeid.encode())
    print("seed", seed)
    return np.random.default_rng(seed)


def nmse(got, want):
    d = vkgate.reference.compare(np.ascontiguousarray(got, dtype=np.float32), np.asarray(want, dtype=np.float64))
    assert d["first_bad"] == -1, "non-finite value at %d" % d["first_bad"]
    return d["nmse"]


def assert_close(got, want, bound=NMSE_FP32):
    assert np.shape(got) == np.shape(want), (np.shape(got), np.shape(want))
    e = nmse(got, want)
    assert e <= bound, "nmse %g > %g" % (e, bound)


def tiny_config(**fields):
    c = dict(hidden_size=32, num_heads=4, num_kv_heads=2, head_dim=8, gate_kind="elementwise")
    c.update(fields)
    return vkgate.BlockConfig(**c)


def random_weights(specs, rng):
    """{name: float32 array} for {name: shape}: linear weights ~ N(0, 1/in), norms near 1, biases small."""
    w = {}
    for name, shape in specs.items():
        if "norm" in name:
            a = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            a = 0.1 * rng.standard_normal(shape)
        elif "embed" in name:
            a = rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / np.sqrt(shape[-1])
        w[name] = a.astype(np.float32)
    return w


def block_weights(cfg, rng):
    return random_weights(vkgate.expected_weights(cfg), rng)


def random_x(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def tiny_block(ctx, rng, batch, tokens, **fields):
    """(config, weights, block, x [batch, tokens, D], the oracle's output for x)."""
    cfg = tiny_config(**fields)
    w = block_weights(cfg, rng)
    x = random_x(rng, batch, tokens, cfg.hidden_size)
    return cfg, w, vkgate.GatedAttention(ctx, cfg, w), x, vkgate.reference.forward(cfg, w, x)["output"]


def bf16_round(a):
    """float32 rounded to bfloat16 (nearest, ties to even) and back."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def stored(weights, precision):
    """The weights as the device holds them under `precision` (what the oracle must see)."""
    if precision == "fp16":
        return {k: v.astype(np.float16).astype(np.float32) for k, v in weights.items()}
    if precision == "bf16":
        return {k: bf16_round(v) for k, v in weights.items()}
    return weights


def random_model_weights(specs, rng):
    """{name: float32 array} for {name: shape}: norms near 1, linear weights ~ N(0, 1/in)."""
    return {name: (1.0 + 0.2 * rng.standard_normal(shape) if "norm" in name
                   else rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
            for name, shape in specs.items()}


def write_safetensors(path, tensors):
    """tensors: {name: float32 / float16 numpy array} -> a .safetensors file."""
    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        data = a.tobytes()
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def tokenizer_vocab():
    return vkgate.Tokenizer(TOKENIZER_JSON).vocab_size


def write_model(directory, rng, with_tokenizer=True, **overrides):
    """A tiny random qwen3 model with the paper's elementwise gate: config.json,
    model.safetensors and (with_tokenizer) a tokenizer.json whose vocabulary is the model's.
    Returns (ModelConfig, weights by full name)."""
    config = {
        "model_type": "qwen3", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "num_hidden_layers": 2, "intermediate_size": 48, "vocab_size": tokenizer_vocab(),
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "elementwise_attn_output_gate": True,
        "tie_word_embeddings": False, "eos_token_id": 269,
    }
    config.update(overrides)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    cfg = vkgate.load_model_config(str(directory))
    weights = random_weights(vkgate.expected_model_weights(cfg), rng)
    write_safetensors(os.path.join(directory, "model.safetensors"), weights)
    if with_tokenizer:
        with open(TOKENIZER_JSON, "rb") as src, open(os.path.join(directory, "tokenizer.json"), "wb") as dst:
            dst.write(src.read())
    return cfg, weights
