"""RoPE scaling from Python: the RopeScaling fields, config.json's rope_scaling /
rope_parameters, vkgate.reference.rope_frequencies against transformers' numbers,
and tiny models with yarn and dynamic NTK (a prefill and decode steps past
max_position_embeddings) against vkgate.reference."""
import numpy as np
import pytest

import vkgate
from conftest import NMSE_MODEL_FP32, assert_close, write_model


def test_fields_and_validation():
    s = vkgate.RopeScaling()
    assert s.type == "default" and s.factor == 1.0 and s.beta_fast == 32.0 and s.truncate
    assert "rope_scaling" in vkgate.BlockConfig.FIELDS and "max_position_embeddings" in vkgate.BlockConfig.FIELDS
    cfg = vkgate.BlockConfig(hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16, max_position_embeddings=8,
                             rope_scaling=vkgate.RopeScaling(type="dynamic", factor=2.0))
    cfg.validate()
    cfg.rope_scaling.factor = 0.5  # the attribute is the config's own value, edited in place
    with pytest.raises(vkgate.Error, match=r"rope_scaling\.factor must be >= 1") as e:
        cfg.validate()
    assert e.value.code == "invalid_config"
    with pytest.raises(vkgate.Error, match="'default', 'linear', 'dynamic', 'yarn', 'llama3'"):
        vkgate.RopeScaling(type="longrope")
    with pytest.raises(vkgate.Error, match="no field 'scale'"):
        vkgate.RopeScaling(scale=2.0)


def test_frequencies_of_llama31():
    # Llama 3.1's rope_scaling; the numbers from transformers' _compute_llama3_parameters in float64.
    cfg = vkgate.BlockConfig(hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128, rope_theta=500000.0,
                             max_position_embeddings=131072,
                             rope_scaling=vkgate.RopeScaling(type="llama3", factor=8.0, low_freq_factor=1.0,
                                                             high_freq_factor=4.0,
                                                             original_max_position_embeddings=8192))
    inv_freq, attention = vkgate.reference.rope_frequencies(cfg, 1)
    assert inv_freq.shape == (64,) and attention == 1.0
    np.testing.assert_allclose(inv_freq[[0, 10, 30, 63]],
                               [1.0, 0.12868737343265052, 0.0013718935677611381, 3.068925988914511e-07], rtol=1e-13)


def test_config_json_spellings(tmp_path):
    llama31 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_type": "llama3"}
    cfg, _ = write_model(tmp_path / "a", np.random.default_rng(1), with_tokenizer=False, rope_scaling=llama31,
                         max_position_embeddings=131072)
    assert cfg.attention.rope_scaling.type == "llama3"
    assert cfg.attention.rope_scaling == vkgate.RopeScaling(**{k: v for k, v in llama31.items() if k != "rope_type"},
                                                            type="llama3")
    with pytest.raises(vkgate.Error, match=r"rope_scaling\.type.*\"mrope\"") as e:
        write_model(tmp_path / "b", np.random.default_rng(1), with_tokenizer=False, rope_scaling={"type": "mrope"})
    assert e.value.code == "invalid_config"


def test_yarn_model_against_reference(ctx, tmp_path):
    d = tmp_path / "yarn"
    cfg, w = write_model(d, np.random.default_rng(7), with_tokenizer=False, max_position_embeddings=64,
                         rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16})
    assert cfg.attention.rope_scaling.type == "yarn"
    model = vkgate.Model.load(ctx, str(d))
    ids = np.random.default_rng(8).integers(0, cfg.vocab_size, size=(2, 10))
    assert_close(model.logits(ids), vkgate.reference.model_forward(cfg, w, ids)["logits"], NMSE_MODEL_FP32)


def test_dynamic_ntk_decode_steps(ctx, tmp_path):
    d = tmp_path / "dynamic"
    cfg, w = write_model(d, np.random.default_rng(9), with_tokenizer=False, max_position_embeddings=4,
                         rope_scaling={"type": "dynamic", "factor": 2.0})
    model = vkgate.Model.load(ctx, str(d))
    ids = np.random.default_rng(10).integers(0, cfg.vocab_size, size=(1, 8))
    want = vkgate.reference.model_forward(cfg, w, ids, steps=[3, 1, 1, 1, 1, 1])["logits"]
    seq = model.start(1, 8)
    assert_close(model.extend(seq, ids[:, :3]), want[:, 2], NMSE_MODEL_FP32)
    for t in range(3, 8):
        assert_close(model.extend(seq, ids[:, t:t + 1]), want[:, t], NMSE_MODEL_FP32)
    with pytest.raises(vkgate.Error, match="steps"):
        vkgate.reference.model_forward(cfg, w, ids, steps=[3, 1])
    prompt = ids[0, :3]
    np.testing.assert_array_equal(model.generate(prompt, max_new_tokens=5, stop_at_eos=False),
                                  vkgate.reference.greedy_generate(cfg, w, prompt, 5, stop_at_eos=False))
