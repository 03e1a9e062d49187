"""Sparse mixture-of-experts models from Python: the wave-3 golden qwen3_next
and qwen3_moe checkpoints (logits, statistics with the expert load, greedy
ids), and a random qwen3_moe directory against vkgate.reference."""
import json
import os
import struct

import numpy as np

import vkgate
from conftest import NMSE_MODEL_FP32, REPO, assert_close, random_model_weights, write_safetensors

WAVE3 = os.path.join(REPO, "tests", "golden", "wave3", "models")


def read_safetensors(path):
    """The F32 and I64 tensors of a .safetensors file as numpy arrays."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        dtype = {"F32": np.float32, "I64": np.int64}[t["dtype"]]
        out[name] = np.frombuffer(data[a:b], dtype=dtype).reshape(t["shape"])
    return out


def test_golden_models(ctx):
    for name in ("qwen3_next_tiny", "qwen3_moe_tiny"):
        d = os.path.join(WAVE3, name)
        model = vkgate.Model.load(ctx, d)
        cfg = model.config
        assert cfg.moe.num_experts == 8 and cfg.moe.num_experts_per_tok == 2 and cfg.moe.norm_topk_prob
        assert cfg.moe_layers() == list(range(cfg.num_hidden_layers))
        ids = read_safetensors(os.path.join(d, "input.safetensors"))["input_ids"]
        expected = read_safetensors(os.path.join(d, "expected.safetensors"))
        logits, stats = model.logits(ids, stats=True)
        assert_close(logits, expected["logits"], NMSE_MODEL_FP32)
        np.testing.assert_allclose(stats["max_activation"], expected["stats.max_activation"], rtol=1e-4)
        assert stats["expert_load"].shape == (cfg.num_hidden_layers, 8)
        np.testing.assert_allclose(stats["expert_load"].sum(axis=1), 2.0, rtol=1e-6)
        if "stats.first_token_attn" in expected:
            np.testing.assert_allclose(stats["first_token_attn"], expected["stats.first_token_attn"], atol=1e-4)
        gen = json.load(open(os.path.join(d, "generate.json")))
        out = model.generate(gen["prompt_ids"], max_new_tokens=gen["max_new_tokens"])
        assert list(out) == gen["generated"]


def test_random_qwen3_moe_directory(ctx, rng, tmp_path):
    """Two layers, 4 experts of 16, top 2 without renormalising; layer 0 dense (mlp_only_layers)."""
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen3_moe", "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 16, "intermediate_size": 40, "num_hidden_layers": 2, "vocab_size": 60, "num_experts": 4,
        "num_experts_per_tok": 2, "moe_intermediate_size": 16, "mlp_only_layers": [0]}))
    cfg = vkgate.load_model_config(str(tmp_path))
    assert cfg.model_type == "qwen3_moe" and not cfg.moe.norm_topk_prob and cfg.moe_layers() == [1]
    specs = vkgate.expected_model_weights(cfg)
    assert "model.layers.1.mlp.experts.3.down_proj.weight" in specs and "model.layers.0.mlp.up_proj.weight" in specs
    w = random_model_weights(specs, rng)
    write_safetensors(tmp_path / "model.safetensors", w)
    model = vkgate.Model.load(ctx, tmp_path)
    ids = rng.integers(0, 60, size=(2, 5))
    want = vkgate.reference.model_forward(cfg, w, ids)
    logits, stats = model.logits(ids, stats=True)
    assert_close(logits, want["logits"], NMSE_MODEL_FP32)
    assert list(stats["moe_layers"]) == [1] and list(stats["attention_layers"]) == [0, 1]
    np.testing.assert_allclose(stats["expert_load"], want["expert_load"], atol=1e-6)
