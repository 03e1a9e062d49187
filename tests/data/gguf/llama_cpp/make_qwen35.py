# Small random Qwen3.5 checkpoints (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM) and
# their conversion by llama.cpp's own convert_hf_to_gguf.py (README.md says how each
# file here was made), with make_qwen3next.py's value() and stand-ins:
#
#   python3 make_qwen35.py checkpoint qwen35|qwen35moe TOKENIZER_JSON OUT_DIR
#   PYTHONPATH=LLAMA_CPP/gguf-py python3 make_qwen35.py convert qwen35|qwen35moe LLAMA_CPP MODEL_DIR OUT.gguf
#       = convert_hf_to_gguf.py MODEL_DIR --outtype f16 [--no-mtp] --outfile OUT.gguf: qwen35
#         without its MTP block (it has none), qwen35moe with it (the converter's default)
#
# They have 4 and 2 value heads per key head, so the converter's reordering of the value
# heads (grouped by key head in the checkpoint, tiled in the file) shows.
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_qwen3next as q3n  # noqa: E402

COMMON = {
    "vocab_size": 272, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 32, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "hidden_act": "silu",
    "attention_bias": False, "full_attention_interval": 2, "layer_types": ["linear_attention", "full_attention"],
    "linear_num_key_heads": 2, "linear_conv_kernel_dim": 4,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                        "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    "tie_word_embeddings": True, "bos_token_id": 268, "eos_token_id": 268, "torch_dtype": "float16",
}
CONFIGS = {
    # Rows of 256 (hidden size, and out_proj's nv·dv), so that k-quants fit; a k-quant
    # block of out_proj's then spans all eight value heads. llama.cpp's qwen35 takes
    # the value head size to be the key head size (ssm.state_size).
    "qwen35": dict(COMMON, architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text", hidden_size=256,
                   intermediate_size=64, linear_num_value_heads=8, linear_key_head_dim=32, linear_value_head_dim=32),
    "qwen35moe": dict(COMMON, architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe_text", hidden_size=128,
                      intermediate_size=64, linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32,
                      num_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16,
                      norm_topk_prob=True, mtp_num_hidden_layers=1),
}


def layer_specs(c, p, linear):
    D = c["hidden_size"]
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv, K = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
    specs = [(p + "input_layernorm.weight", (D,))]
    if linear:
        a = p + "linear_attn."
        C = 2 * nk * dk + nv * dv
        specs += [(a + "in_proj_qkv.weight", (C, D)), (a + "in_proj_z.weight", (nv * dv, D)),
                  (a + "in_proj_b.weight", (nv, D)), (a + "in_proj_a.weight", (nv, D)),
                  (a + "conv1d.weight", (C, 1, K)), (a + "A_log", (nv,)), (a + "dt_bias", (nv,)),
                  (a + "norm.weight", (dv,)), (a + "out_proj.weight", (D, nv * dv))]
    else:
        specs += q3n.attention_specs(c, p + "self_attn.")
    specs.append((p + "post_attention_layernorm.weight", (D,)))
    m = p + "mlp."
    if "num_experts" in c:
        return specs + q3n.moe_specs(c, m)
    I = c["intermediate_size"]
    return specs + [(m + "gate_proj.weight", (I, D)), (m + "up_proj.weight", (I, D)), (m + "down_proj.weight", (D, I))]


def tensors(c):
    D = c["hidden_size"]
    specs = [("model.embed_tokens.weight", (c["vocab_size"], D))]
    for l in range(c["num_hidden_layers"]):
        specs += layer_specs(c, f"model.layers.{l}.", c["layer_types"][l] == "linear_attention")
    specs.append(("model.norm.weight", (D,)))
    # Qwen3.5's multi-token-prediction block (a full-attention layer after a fusion
    # of the embedding and the last hidden state): in the file, never run by vkgate.
    for l in range(c.get("mtp_num_hidden_layers", 0)):
        specs += layer_specs(c, f"mtp.layers.{l}.", False)
    if c.get("mtp_num_hidden_layers", 0):
        specs += [("mtp.fc.weight", (D, 2 * D)), ("mtp.pre_fc_norm_embedding.weight", (D,)),
                  ("mtp.pre_fc_norm_hidden.weight", (D,)), ("mtp.norm.weight", (D,))]
    return q3n.stored(specs)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "checkpoint" and sys.argv[2] in CONFIGS:
        q3n.checkpoint(sys.argv[3], sys.argv[4], CONFIGS[sys.argv[2]], tensors)
    elif len(sys.argv) == 6 and sys.argv[1] == "convert" and sys.argv[2] in CONFIGS:
        q3n.convert(sys.argv[3], sys.argv[4], sys.argv[5], mtp="mtp_num_hidden_layers" in CONFIGS[sys.argv[2]])
    else:
        sys.exit("usage: make_qwen35.py checkpoint qwen35|qwen35moe TOKENIZER_JSON OUT_DIR"
                 " | convert qwen35|qwen35moe LLAMA_CPP MODEL_DIR OUT.gguf")
