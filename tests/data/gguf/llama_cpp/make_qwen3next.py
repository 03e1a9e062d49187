# A small random Qwen3-Next checkpoint (tiny-qwen3next/) and its conversion by
# llama.cpp's own convert_hf_to_gguf.py (README.md says how each file here was made).
#
#   python3 make_qwen3next.py checkpoint TOKENIZER_JSON OUT_DIR
#       OUT_DIR/{config.json, model.safetensors, tokenizer.json, tokenizer_config.json}
#   PYTHONPATH=LLAMA_CPP/gguf-py python3 make_qwen3next.py convert LLAMA_CPP MODEL_DIR OUT.gguf
#       runs LLAMA_CPP/convert_hf_to_gguf.py MODEL_DIR --outtype f16 --no-mtp --outfile OUT.gguf
#       unchanged, with stand-ins for what is not installed here: transformers (AutoConfig
#       fails, so the converter reads config.json itself, its own fallback, and
#       get_vocab_base lists tokenizer.json's vocabulary and added tokens as AutoTokenizer
#       would for this tokenizer, pre-tokenizer "gpt-2"), tqdm's progress bar, and the
#       float8 dtypes an older torch lacks (only named in the converter's tables).
#
# Every value is a function of the tensor's name and the element's index (value()
# below), so that tests/test_gguf_llama_cpp.cpp rebuilds the checkpoint without
# reading it: matrices (2-D and 3-D) are stored F16, 1-D tensors F32.
import json, os, struct, sys
import numpy as np

CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
    "hidden_size": 256, "num_hidden_layers": 2, "vocab_size": 272,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "partial_rotary_factor": 0.25,
    "rope_theta": 10000000.0, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
    "hidden_act": "silu", "attention_bias": False, "intermediate_size": 64,
    "full_attention_interval": 2, "layer_types": ["linear_attention", "full_attention"],
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
    "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16, "norm_topk_prob": True, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "tie_word_embeddings": True, "bos_token_id": 268, "eos_token_id": 268,
    "torch_dtype": "float16",
}

M64 = (1 << 64) - 1


def fnv1a64(s):
    h = 0xcbf29ce484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001b3) & M64
    return h


def uniform(name, n):
    """r in [-1, 1): splitmix64(fnv1a64(name) + i), its top 53 bits."""
    with np.errstate(over="ignore"):
        x = np.uint64(fnv1a64(name)) + np.arange(n, dtype=np.uint64)
        x = x + np.uint64(0x9e3779b97f4a7c15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) * 2.0 ** -52 - 1.0


def value(name, shape):
    """The tensor's values (float64, before rounding to its stored type)."""
    r = uniform(name, int(np.prod(shape))).reshape(shape)
    if name.endswith("linear_attn.norm.weight"):
        return 1.0 + 0.2 * r              # the Gated DeltaNet's output norm: a plain weight
    if name.endswith("norm.weight"):
        return 0.2 * r                    # Qwen3NextRMSNorm: (1 + w), zero-centred
    if name.endswith("A_log"):
        return r
    if name.endswith("dt_bias"):
        return 0.5 + 0.5 * r
    if name.endswith("embed_tokens.weight"):
        return r
    return r / np.sqrt(shape[-1])          # a projection: by its input width


def tensors(c):
    D, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv, K = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
    specs = [("model.embed_tokens.weight", (V, D))]
    for l in range(L):
        p = f"model.layers.{l}."
        specs.append((p + "input_layernorm.weight", (D,)))
        if c["layer_types"][l] == "linear_attention":
            a = p + "linear_attn."
            specs += [(a + "in_proj_qkvz.weight", (2 * nk * dk + 2 * nv * dv, D)), (a + "in_proj_ba.weight", (2 * nv, D)),
                      (a + "conv1d.weight", (2 * nk * dk + nv * dv, 1, K)), (a + "A_log", (nv,)), (a + "dt_bias", (nv,)),
                      (a + "norm.weight", (dv,)), (a + "out_proj.weight", (D, nv * dv))]
        else:
            specs += attention_specs(c, p + "self_attn.")
        specs.append((p + "post_attention_layernorm.weight", (D,)))
        specs += moe_specs(c, p + "mlp.")
    specs.append(("model.norm.weight", (D,)))
    return stored(specs)


def attention_specs(c, a):
    """The gated attention's tensors under `a` (q_proj: each head's query, then its gate)."""
    D, H, KV, Dh = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    return [(a + "q_proj.weight", (2 * H * Dh, D)), (a + "k_proj.weight", (KV * Dh, D)),
            (a + "v_proj.weight", (KV * Dh, D)), (a + "o_proj.weight", (D, H * Dh)),
            (a + "q_norm.weight", (Dh,)), (a + "k_norm.weight", (Dh,))]


def moe_specs(c, m):
    """The sparse MLP's tensors under `m`: router, experts, shared expert and its gate."""
    D, E = c["hidden_size"], c["num_experts"]
    Im, Is = c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    specs = [(m + "gate.weight", (E, D))]
    for e in range(E):
        specs += [(m + f"experts.{e}.gate_proj.weight", (Im, D)), (m + f"experts.{e}.up_proj.weight", (Im, D)),
                  (m + f"experts.{e}.down_proj.weight", (D, Im))]
    return specs + [(m + "shared_expert.gate_proj.weight", (Is, D)), (m + "shared_expert.up_proj.weight", (Is, D)),
                    (m + "shared_expert.down_proj.weight", (D, Is)), (m + "shared_expert_gate.weight", (1, D))]


def stored(specs):
    """Each (name, shape)'s values as the checkpoint stores them: matrices F16, vectors F32."""
    out = {}
    for name, shape in specs:
        v = value(name, shape).astype(np.float32)
        out[name] = v.astype(np.float16) if len(shape) > 1 else v
    return out


def write_safetensors(path, ts):
    header, off, blobs = {}, 0, []
    for name, a in ts.items():
        b = a.tobytes()
        header[name] = {"dtype": "F16" if a.dtype == np.float16 else "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def checkpoint(tokenizer_json, out, config=CONFIG, make=tensors):
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), make(config))
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
    tok = json.load(open(tokenizer_json))
    tok["pre_tokenizer"]["add_prefix_space"] = False
    tok["post_processor"] = None
    json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w"), indent=1, ensure_ascii=False)
    json.dump({"bos_token": "<|end|>", "eos_token": "<|end|>", "add_bos_token": False},
              open(os.path.join(out, "tokenizer_config.json"), "w"))


def convert(llama_cpp, model_dir, outfile, mtp=False):
    """convert_hf_to_gguf.py MODEL_DIR --outtype f16 [--no-mtp] --outfile OUTFILE (the MTP
    blocks, where the checkpoint has them, are the converter's default)."""
    import types
    transformers = types.ModuleType("transformers")

    class AutoConfig:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise OSError("transformers is not installed")

    transformers.AutoConfig = AutoConfig
    sys.modules["transformers"] = transformers
    if "tqdm" not in sys.modules:  # the writer's progress bar, when tqdm is not installed
        try:
            import tqdm  # noqa: F401
        except ImportError:
            tqdm = types.ModuleType("tqdm")

            class Bar:
                def __init__(self, *args, **kwargs): pass
                def __getattr__(self, name): return lambda *args, **kwargs: None

            tqdm.tqdm = Bar
            sys.modules["tqdm"] = tqdm
    import torch
    # An older torch (1.13 here) lacks the float8 dtypes, which the converter only
    # names in its dtype tables (this checkpoint has none): unused dtypes stand in.
    if not hasattr(torch, "float8_e4m3fn"):
        torch.float8_e4m3fn, torch.float8_e5m2 = torch.qint32, torch.quint8
    sys.path.insert(0, llama_cpp)
    import gguf
    import conversion.base as base
    import convert_hf_to_gguf

    def get_vocab_base(self):
        # What the converter's get_vocab_base reads from AutoTokenizer, for this
        # tokenizer: every id below vocab_size, [PADn] UNUSED where there is none,
        # added tokens CONTROL when special; the pre-tokenizer is GPT-2's own.
        tok = json.load(open(os.path.join(self.dir_model, "tokenizer.json")))
        reverse = {i: t for t, i in tok["model"]["vocab"].items()}
        added = {a["id"]: a for a in tok["added_tokens"]}
        reverse.update({i: a["content"] for i, a in added.items()})
        tokens, types_ = [], []
        for i in range(self.hparams["vocab_size"]):
            if i not in reverse:
                tokens.append(f"[PAD{i}]")
                types_.append(gguf.TokenType.UNUSED)
            elif i in added:
                tokens.append(reverse[i])
                types_.append(gguf.TokenType.CONTROL if added[i]["special"] or self.does_token_look_special(reverse[i])
                              else gguf.TokenType.USER_DEFINED)
            else:
                tokens.append(reverse[i])
                types_.append(gguf.TokenType.NORMAL)
        return tokens, types_, "gpt-2"

    base.TextModel.get_vocab_base = get_vocab_base
    sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outtype", "f16"] + ([] if mtp else ["--no-mtp"]) + ["--outfile", outfile]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    if sys.argv[1] == "checkpoint":
        checkpoint(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "convert":
        convert(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: make_qwen3next.py checkpoint TOKENIZER_JSON OUT_DIR | convert LLAMA_CPP MODEL_DIR OUT.gguf")
