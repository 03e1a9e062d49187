#!/usr/bin/env python3
"""Write a random-weight GGUF v3 file of llama.cpp's `qwen3` architecture.

Why this exists: to compare vkgate against llama.cpp's Vulkan backend on the
device machine we need a peer model of the same shape as Qwen3-0.6B that
`llama-bench` can load, without downloading real weights. Speed benchmarks do
not depend on the weight values, so random F16 weights are enough.

It is pure Python 3 standard library (no numpy) because the device machine
may not have numpy installed. It is written from the GGUF specification; it
does not use llama.cpp's gguf-py.

Usage:
    python3 tools/make_random_gguf.py --shape qwen3-0.6b --output qwen3-0.6b-rand.gguf
    python3 tools/make_random_gguf.py --shape tiny --output tiny.gguf

The file holds: general.* metadata, qwen3.* hyperparameters, a GPT-2 style
byte-level BPE tokenizer (256 byte tokens, a few merges, filler tokens and
Qwen's special tokens), F32 norm weights (all 1.0) and F16 random matrices
(finite values of magnitude 2^-7..2^-5). Embeddings are tied, so there is no
`output.weight` tensor.
"""

import argparse
import os
import struct
import sys
import time

# --- GGUF constants (spec: ggml/docs/gguf.md) --------------------------------

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, \
    T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(13)

_SCALAR_FMT = {
    T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h",
    T_UINT32: "<I", T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?",
    T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d",
}

GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
LLAMA_FTYPE_MOSTLY_F16 = 1

TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3

SHAPES = {
    # Qwen/Qwen3-0.6B config.json
    "qwen3-0.6b": dict(hidden=1024, layers=28, heads=16, kv_heads=8,
                       head_dim=128, intermediate=3072, vocab=151936,
                       rope_theta=1e6, rms_eps=1e-6, ctx=40960),
    # a few-hundred-KiB model for smoke tests on CPU / lavapipe
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16,
                 intermediate=128, vocab=512, rope_theta=1e6, rms_eps=1e-6,
                 ctx=4096),
}


# --- serialisation helpers ----------------------------------------------------

def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _kv(key, vtype, value, elem_type=None):
    out = [_str(key), struct.pack("<I", vtype)]
    if vtype == T_STRING:
        out.append(_str(value))
    elif vtype == T_ARRAY:
        out.append(struct.pack("<IQ", elem_type, len(value)))
        if elem_type == T_STRING:
            out.extend(_str(v) for v in value)
        else:
            fmt = _SCALAR_FMT[elem_type]
            out.append(struct.pack("<%d%s" % (len(value), fmt[1]), *value))
    else:
        out.append(struct.pack(_SCALAR_FMT[vtype], value))
    return b"".join(out)


def _pad(n):
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


# --- tokenizer ----------------------------------------------------------------

def byte_level_chars():
    """GPT-2's bytes_to_unicode: byte value -> printable unicode character."""
    keep = (list(range(ord("!"), ord("~") + 1)) +
            list(range(ord("\u00a1"), ord("\u00ac") + 1)) +
            list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    table = {}
    n = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return [table[b] for b in range(256)]


def build_vocab(n_vocab):
    """Return (tokens, token_types, merges, bos, eos, pad)."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    if n_vocab >= 151646:
        # Qwen's real ids for its first special tokens
        special_ids = [151643, 151644, 151645]
    else:
        special_ids = [n_vocab - 3, n_vocab - 2, n_vocab - 1]
    bytes_tok = byte_level_chars()
    tokens = list(bytes_tok)
    seen = set(tokens)
    merges = []
    # a few genuine merges of byte tokens (lower-case letter pairs and
    # 'Ġ' + letter), whose results are themselves tokens
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    space = bytes_tok[ord(" ")]  # 'Ġ'
    pairs = [(space, c) for c in letters] + [(a, b) for a in letters for b in letters]
    budget = max(0, min(len(pairs), n_vocab - 256 - len(specials) - 1, 2000))
    for a, b in pairs[:budget]:
        tokens.append(a + b)
        seen.add(a + b)
        merges.append(a + " " + b)
    types = [TOKEN_TYPE_NORMAL] * len(tokens)
    i = 0
    while len(tokens) < n_vocab:
        idx = len(tokens)
        if idx in special_ids:
            tok = specials[special_ids.index(idx)]
            tt = TOKEN_TYPE_CONTROL
        else:
            tok = "[fill%d]" % i
            i += 1
            tt = TOKEN_TYPE_NORMAL
        assert tok not in seen
        seen.add(tok)
        tokens.append(tok)
        types.append(tt)
    assert len(tokens) == n_vocab and len(seen) == n_vocab
    eos = special_ids[0]
    return tokens, types, merges, eos, eos, eos


# --- random data --------------------------------------------------------------

def random_f16_block(n_bytes):
    """n_bytes of random finite fp16 values (little endian), |x| in [2^-7, 2^-5).

    fp16 = s eeeee mmmmmmmmmm. The high byte of each value is s eeeee mm; we
    keep s, the lowest exponent bit and the two mantissa bits, and force the
    exponent to 0b0100x (8 or 9, bias 15). Done with one bytes.translate over
    the odd bytes, so no per-element Python loop.
    """
    block = bytearray(os.urandom(n_bytes))
    table = bytes(((h & 0x87) | 0x20) for h in range(256))
    block[1::2] = bytes(block[1::2]).translate(table)
    return bytes(block)


class RandomSource:
    def __init__(self, block_bytes=4 << 20):
        self.block = random_f16_block(block_bytes)
        self.pos = 0

    def write(self, f, n_bytes):
        """Write n_bytes taken cyclically from the block (start moves on)."""
        blk = self.block
        L = len(blk)
        left = n_bytes
        while left > 0:
            start = self.pos % L
            take = min(left, L - start)
            f.write(blk[start:start + take])
            left -= take
            self.pos += take
        # shift by an odd number of fp16 values so tensors differ
        self.pos += 2 * 4099


# --- model description ----------------------------------------------------------

def tensors_for(cfg):
    """List of (name, dims in ggml order [ne0, ne1], ggml type)."""
    H, F, V = cfg["hidden"], cfg["intermediate"], cfg["vocab"]
    q = cfg["heads"] * cfg["head_dim"]
    kv = cfg["kv_heads"] * cfg["head_dim"]
    hd = cfg["head_dim"]
    t = [("token_embd.weight", [H, V], GGML_TYPE_F16)]
    for i in range(cfg["layers"]):
        p = "blk.%d." % i
        t += [
            (p + "attn_norm.weight", [H], GGML_TYPE_F32),
            (p + "attn_q.weight", [H, q], GGML_TYPE_F16),
            (p + "attn_k.weight", [H, kv], GGML_TYPE_F16),
            (p + "attn_v.weight", [H, kv], GGML_TYPE_F16),
            (p + "attn_output.weight", [q, H], GGML_TYPE_F16),
            (p + "attn_q_norm.weight", [hd], GGML_TYPE_F32),
            (p + "attn_k_norm.weight", [hd], GGML_TYPE_F32),
            (p + "ffn_norm.weight", [H], GGML_TYPE_F32),
            (p + "ffn_gate.weight", [H, F], GGML_TYPE_F16),
            (p + "ffn_up.weight", [H, F], GGML_TYPE_F16),
            (p + "ffn_down.weight", [F, H], GGML_TYPE_F16),
        ]
    t.append(("output_norm.weight", [H], GGML_TYPE_F32))
    return t


def metadata_for(shape_name, cfg):
    A = "qwen3"
    tokens, types, merges, bos, eos, pad = build_vocab(cfg["vocab"])
    kvs = [
        _kv("general.architecture", T_STRING, A),
        _kv("general.type", T_STRING, "model"),
        _kv("general.name", T_STRING, "random-%s" % shape_name),
        _kv("general.file_type", T_UINT32, LLAMA_FTYPE_MOSTLY_F16),
        _kv("general.alignment", T_UINT32, ALIGNMENT),
        _kv(A + ".block_count", T_UINT32, cfg["layers"]),
        _kv(A + ".context_length", T_UINT32, cfg["ctx"]),
        _kv(A + ".embedding_length", T_UINT32, cfg["hidden"]),
        _kv(A + ".feed_forward_length", T_UINT32, cfg["intermediate"]),
        _kv(A + ".attention.head_count", T_UINT32, cfg["heads"]),
        _kv(A + ".attention.head_count_kv", T_UINT32, cfg["kv_heads"]),
        _kv(A + ".attention.key_length", T_UINT32, cfg["head_dim"]),
        _kv(A + ".attention.value_length", T_UINT32, cfg["head_dim"]),
        _kv(A + ".rope.freq_base", T_FLOAT32, cfg["rope_theta"]),
        _kv(A + ".attention.layer_norm_rms_epsilon", T_FLOAT32, cfg["rms_eps"]),
        _kv("tokenizer.ggml.model", T_STRING, "gpt2"),
        _kv("tokenizer.ggml.pre", T_STRING, "qwen2"),
        _kv("tokenizer.ggml.tokens", T_ARRAY, tokens, T_STRING),
        _kv("tokenizer.ggml.token_type", T_ARRAY, types, T_INT32),
        _kv("tokenizer.ggml.merges", T_ARRAY, merges, T_STRING),
        _kv("tokenizer.ggml.bos_token_id", T_UINT32, bos),
        _kv("tokenizer.ggml.eos_token_id", T_UINT32, eos),
        _kv("tokenizer.ggml.padding_token_id", T_UINT32, pad),
        _kv("tokenizer.ggml.add_bos_token", T_BOOL, False),
    ]
    return kvs


def write_gguf(path, shape_name, cfg):
    kvs = metadata_for(shape_name, cfg)
    tensors = tensors_for(cfg)

    # tensor infos with offsets relative to the start of the data section
    infos = []
    sizes = []
    offset = 0
    for name, dims, ttype in tensors:
        n = 1
        for d in dims:
            n *= d
        nbytes = n * (4 if ttype == GGML_TYPE_F32 else 2)
        infos.append(_str(name) + struct.pack("<I", len(dims)) +
                     struct.pack("<%dQ" % len(dims), *dims) +
                     struct.pack("<IQ", ttype, offset))
        sizes.append(nbytes)
        offset += nbytes + _pad(nbytes)

    header = (GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kvs)) +
              b"".join(kvs) + b"".join(infos))
    header += b"\0" * _pad(len(header))

    rnd = RandomSource()
    ones_f32 = struct.pack("<f", 1.0) * max(cfg["hidden"], cfg["head_dim"])
    tmp = path + ".tmp"
    with open(tmp, "wb", buffering=16 << 20) as f:
        f.write(header)
        for (name, dims, ttype), nbytes in zip(tensors, sizes):
            if ttype == GGML_TYPE_F32:
                f.write(ones_f32[:nbytes])
            else:
                rnd.write(f, nbytes)
            f.write(b"\0" * _pad(nbytes))
    os.replace(tmp, path)
    return len(header) + offset


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    ap.add_argument("--output", required=True, help="GGUF file to write")
    args = ap.parse_args(argv)
    t0 = time.time()
    size = write_gguf(args.output, args.shape, SHAPES[args.shape])
    print("wrote %s: %.1f MiB in %.1f s" % (args.output, size / 2**20, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
