# Small random qwen3 / llama checkpoints (F16 safetensors) with a tiny GPT-2 style tokenizer:
# the sources of the GGUF files here (README.md). Usage: python3 make_checkpoints.py TOKENIZER_JSON
# (tests/tokenizer/unit/gpt2_style.json); writes tiny-qwen3/ and tiny-llama/ in the current directory.
import json, struct, sys, os
import numpy as np

def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, a in tensors.items():
        b = a.astype(np.float16).tobytes()
        header[name] = {"dtype": "F16", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h)
        for b in blobs: f.write(b)

def make(dir, model_type, seed, tied):
    rng = np.random.default_rng(seed)
    D, H, KV, Dh, I, L, V = 256, 2, 1, 32, 64, 2, 272
    cfg = {"model_type": model_type, "architectures": ["Qwen3ForCausalLM" if model_type == "qwen3" else "LlamaForCausalLM"],
           "hidden_size": D, "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": Dh,
           "intermediate_size": I, "num_hidden_layers": L, "vocab_size": V, "rms_norm_eps": 1e-6,
           "rope_theta": 1000000.0 if model_type == "qwen3" else 500000.0, "max_position_embeddings": 512,
           "tie_word_embeddings": tied, "hidden_act": "silu", "attention_bias": False,
           "bos_token_id": 268, "eos_token_id": 268, "torch_dtype": "float16"}
    t = {}
    def lin(o, i): return rng.standard_normal((o, i)) / np.sqrt(i)
    t["model.embed_tokens.weight"] = rng.standard_normal((V, D))
    for l in range(L):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = 1 + 0.2 * rng.standard_normal(D)
        t[p + "self_attn.q_proj.weight"] = lin(H * Dh, D)
        t[p + "self_attn.k_proj.weight"] = lin(KV * Dh, D)
        t[p + "self_attn.v_proj.weight"] = lin(KV * Dh, D)
        t[p + "self_attn.o_proj.weight"] = lin(D, H * Dh)
        if model_type == "qwen3":
            t[p + "self_attn.q_norm.weight"] = 1 + 0.2 * rng.standard_normal(Dh)
            t[p + "self_attn.k_norm.weight"] = 1 + 0.2 * rng.standard_normal(Dh)
        t[p + "post_attention_layernorm.weight"] = 1 + 0.2 * rng.standard_normal(D)
        t[p + "mlp.gate_proj.weight"] = lin(I, D)
        t[p + "mlp.up_proj.weight"] = lin(I, D)
        t[p + "mlp.down_proj.weight"] = lin(D, I)
    t["model.norm.weight"] = 1 + 0.2 * rng.standard_normal(D)
    if not tied: t["lm_head.weight"] = lin(V, D)
    os.makedirs(dir, exist_ok=True)
    write_safetensors(os.path.join(dir, "model.safetensors"), t)
    json.dump(cfg, open(os.path.join(dir, "config.json"), "w"), indent=1)
    tok = json.load(open(sys.argv[1]))
    tok["pre_tokenizer"]["add_prefix_space"] = False
    tok["post_processor"] = None
    json.dump(tok, open(os.path.join(dir, "tokenizer.json"), "w"), indent=1, ensure_ascii=False)
    json.dump({"bos_token": "<|end|>", "eos_token": "<|end|>", "add_bos_token": False}, open(os.path.join(dir, "tokenizer_config.json"), "w"))

make("tiny-qwen3", "qwen3", 1, True)
make("tiny-llama", "llama", 2, False)
