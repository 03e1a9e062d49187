"""A model directory end to end: written here (config.json, model.safetensors,
tokenizer.json), loaded, run, generated from, against vkgate.reference; quantized on load; a GGUF file."""
import os

import numpy as np
import pytest

import vkgate
from conftest import NMSE_MODEL_FP32, REPO, TOKENIZER_JSON, assert_close, nmse, write_model


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    cfg, weights = write_model(d, np.random.default_rng(20))
    return str(d), cfg, weights


def test_logits_and_stats(ctx, tiny_model):
    d, cfg, w = tiny_model
    model = vkgate.Model.load(ctx, d)
    assert model.config.vocab_size == cfg.vocab_size and model.precision == "fp32"
    ids = np.array([[3, 100, 7, 42, 0], [5, 5, 9, 250, 1]], dtype=np.int32)
    want = vkgate.reference.model_forward(cfg, w, ids)
    assert model.stats is None
    logits, stats = model.logits(ids, stats=True)
    assert logits.shape == (2, 5, cfg.vocab_size) and logits.dtype == np.float32
    assert_close(logits, want["logits"], NMSE_MODEL_FP32)
    assert stats["first_token_attn"].shape == (2, 4)
    np.testing.assert_allclose(stats["first_token_attn"], want["first_token_attn"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(stats["gate_mean"], want["gate_mean"], rtol=1e-4)
    np.testing.assert_allclose(stats["max_activation"], want["max_activation"], rtol=1e-4)
    np.testing.assert_array_equal(model.stats["first_token_attn"], stats["first_token_attn"])
    # one row as a 1-D list
    row = model.logits([3, 100, 7])
    assert row.shape == (3, cfg.vocab_size)
    assert_close(row, want["logits"][0, :3], NMSE_MODEL_FP32)
    assert model.memory["weights"] > 0


def test_generate_ids_matches_reference(ctx, tiny_model):
    d, cfg, w = tiny_model
    model = vkgate.Model.load(ctx, d)
    prompt = np.array([11, 200, 31], dtype=np.int64)
    got = model.generate(prompt, max_new_tokens=6, stop_at_eos=False)
    want = vkgate.reference.greedy_generate(cfg, w, prompt, 6, stop_at_eos=False)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    assert model.generate([11, 200, 31], max_new_tokens=0).size == 0


def test_generate_text_streams(ctx, tiny_model):
    d, cfg, w = tiny_model
    model = vkgate.Model.load(ctx, d)
    tok = vkgate.Tokenizer(d)
    stream = model.generate("hello world", max_new_tokens=5, stop_at_eos=False)
    pieces = list(stream)
    assert all(isinstance(p, str) for p in pieces)
    if "\ufffd" not in stream.text:  # a random model may emit bytes that are no whole character
        assert "".join(pieces) == stream.text
    want = vkgate.reference.greedy_generate(cfg, w, tok.encode("hello world"), 5, stop_at_eos=False)
    assert stream.ids == list(want)
    assert stream.text == tok.decode(want)
    assert list(model.generate("hello", max_new_tokens=0)) == []


def test_streams_run_their_prompts_and_steps_together(ctx, tiny_model):
    d, cfg, w = tiny_model
    model = vkgate.Model.load(ctx, d)
    tok = vkgate.Tokenizer(d)
    texts = ["hello world", "hi", "one two three four"]
    streams = [model.generate(t, max_new_tokens=4, stop_at_eos=False) for t in texts]
    lengths = [len(tok.encode(t)) for t in texts]
    assert vkgate.TextStream.prefill_all(streams, 2) == [n <= 2 for n in lengths]
    running = list(streams)
    while running:
        pieces = vkgate.TextStream.step_all(running)
        assert len(pieces) == len(running) and all(isinstance(p, str) for p in pieces)
        running = [s for s in running if s.finish_reason is None]
    for text, stream in zip(texts, streams):
        want = vkgate.reference.greedy_generate(cfg, w, tok.encode(text), 4, stop_at_eos=False)
        assert stream.ids == list(want)
    assert vkgate.TextStream.step_all([]) == [] and vkgate.TextStream.prefill_all([], 1) == []
    with pytest.raises(vkgate.Error, match="ended"):
        vkgate.TextStream.step_all(streams[:1])
    fresh = model.generate("hello", max_new_tokens=2)
    with pytest.raises(vkgate.Error, match="twice"):
        vkgate.TextStream.step_all([fresh, fresh])
    other = vkgate.Model.load(ctx, d).generate("hello", max_new_tokens=2)
    with pytest.raises(vkgate.Error, match=r"streams\[1\]: a stream of another Model"):
        vkgate.TextStream.prefill_all([fresh, other], 1)


def test_sequence_extend(ctx, tiny_model):
    d, cfg, w = tiny_model
    model = vkgate.Model.load(ctx, d)
    ids = np.array([[4, 8, 15, 16, 23, 42]])
    want = vkgate.reference.model_forward(cfg, w, ids)["logits"]
    seq = model.start(1, 8)
    assert (seq.batch, seq.capacity, seq.length) == (1, 8, 0)
    assert_close(model.extend(seq, ids[:, :4]), want[:, 3], NMSE_MODEL_FP32)
    for t in (4, 5):
        assert_close(model.extend(seq, ids[:, t:t + 1]), want[:, t], NMSE_MODEL_FP32)
    seq.truncate(5)
    assert_close(model.extend(seq, [42]), want[0, 5], NMSE_MODEL_FP32)


def test_sequences_extend_together(ctx, tiny_model):
    d, cfg, w = tiny_model
    model = vkgate.Model.load(ctx, d)
    prompts = [[4, 8, 15], [16, 23], [42, 7, 9, 11]]
    together = [model.start(1, 8) for _ in prompts]
    for seq, prompt in zip(together, prompts):
        model.extend(seq, prompt)
    got = model.extend_together(together, [5, 6, 7])
    assert got.shape == (3, cfg.vocab_size)
    assert [s.length for s in together] == [4, 3, 5]
    for row, prompt, nxt in zip(got, prompts, [5, 6, 7]):
        want = vkgate.reference.model_forward(cfg, w, np.array([prompt + [nxt]]))["logits"][0, -1]
        assert_close(row, want, NMSE_MODEL_FP32)
    # Two positions of each (prompts together), each row's last against the reference.
    got = model.extend_together(together, [[1, 2], [3, 4], [5, 6]])
    assert got.shape == (3, cfg.vocab_size)
    assert [s.length for s in together] == [6, 5, 7]
    for row, prompt, nxt in zip(got, prompts, [[5, 1, 2], [6, 3, 4], [7, 5, 6]]):
        want = vkgate.reference.model_forward(cfg, w, np.array([prompt + nxt]))["logits"][0, -1]
        assert_close(row, want, NMSE_MODEL_FP32)
    with pytest.raises(vkgate.Error, match=r"one id per sequence, \[3\], or \[3, tokens\], got \[2\]"):
        model.extend_together(together, [1, 2])
    with pytest.raises(vkgate.Error, match=r"got \[2, 2\]"):
        model.extend_together(together, [[1, 2], [3, 4]])
    with pytest.raises(vkgate.Error, match="3 more do not fit"):
        model.extend_together(together, [[1, 2, 3]] * 3)
    with pytest.raises(vkgate.Error, match=r"sequences\[1\]: expected a vkgate.Sequence"):
        model.extend_together([together[0], 3], [1, 2])
    with pytest.raises(vkgate.Error, match="sequence 1 is given twice"):
        model.extend_together([together[0], together[0]], [1, 2])


def test_sequences_extend_top(ctx, tiny_model):
    d, cfg, w = tiny_model
    model = vkgate.Model.load(ctx, d)
    prompts = [[4, 8, 15], [16, 23]]
    whole, top = ([model.start(1, 8) for _ in prompts] for _ in range(2))
    for a, b, prompt in zip(whole, top, prompts):
        model.extend(a, prompt)
        model.extend(b, prompt)
    want = model.extend_together(whole, [5, 6])
    ids, logits, full = model.extend_top(top, [5, 6], 3)
    assert ids.shape == (2, 3) and ids.dtype == np.int64 and logits.shape == (2, 3) and full == {}
    for row, row_ids, row_logits in zip(want, ids, logits):
        order = np.argsort(-row, kind="stable")[:3]
        assert list(row_ids) == list(order)
        assert np.array_equal(row_logits, row[order])
    assert [s.length for s in top] == [4, 3]
    with pytest.raises(vkgate.Error, match="256"):
        model.extend_top(top, [1, 2], 257)
    with pytest.raises(vkgate.Error, match="one id per sequence"):
        model.extend_top(top, [1], 3)


def test_model_from_dict_and_half_storage(ctx, tiny_model):
    d, cfg, w = tiny_model
    ids = np.array([[1, 2, 3, 4]])
    want = vkgate.reference.model_forward(cfg, w, ids)["logits"]
    assert_close(vkgate.Model(ctx, cfg, w).logits(ids), want, NMSE_MODEL_FP32)
    # the C++ tests' bounds for fp16 / bf16 storage (tests/test_model.cpp)
    assert_close(vkgate.Model.load(ctx, d, precision="fp16").logits(ids), want, 1e-4)
    assert_close(vkgate.Model.load(ctx, d, precision="bf16").logits(ids), want, 1e-3)


def test_model_without_tokenizer_refuses_text(ctx, tmp_path):
    write_model(tmp_path, np.random.default_rng(3), with_tokenizer=False)
    model = vkgate.Model.load(ctx, tmp_path)
    with pytest.raises(vkgate.Error) as e:
        model.generate("hi")
    assert e.value.code == "invalid_argument" and "tokenizer.json" in str(e.value)
    stream = model.generate("hi", max_new_tokens=2, stop_at_eos=False, tokenizer=vkgate.Tokenizer(TOKENIZER_JSON))
    list(stream)
    assert len(stream.ids) == 2


def test_generate_samples_with_a_seed_and_stops_at_a_stop_string(ctx, tiny_model):
    d, cfg, w = tiny_model
    model = vkgate.Model.load(ctx, d)
    options = dict(max_new_tokens=8, stop_at_eos=False, temperature=0.9, top_k=50, top_p=0.95, min_p=0.01,
                   repeat_penalty=1.2, presence_penalty=0.1, frequency_penalty=0.1, seed=5)
    first = model.generate([11, 200, 31], **options)
    np.testing.assert_array_equal(model.generate([11, 200, 31], **options), first)  # the seed repeats the draws
    assert len(first) == 8
    # temperature 0 (the default) is greedy
    np.testing.assert_array_equal(model.generate([11, 200, 31], max_new_tokens=4, stop_at_eos=False),
                                  vkgate.reference.greedy_generate(cfg, w, [11, 200, 31], 4, stop_at_eos=False))

    full = model.generate("hello world", max_new_tokens=12, stop_at_eos=False)
    text = "".join(full)
    assert full.finish_reason == "length" and full.undecoded_ids == []
    at = next((i for i in range(1, len(text) - 1) if text.find(text[i:i + 2]) == i), None)
    if at is not None and "\ufffd" not in text:
        stopped = model.generate("hello world", max_new_tokens=12, stop_at_eos=False, stop=[text[at:at + 2]])
        assert "".join(stopped) == text[:at]
        assert stopped.finish_reason == "stop"


def test_generate_logprobs_are_the_models_log_softmax(ctx, tiny_model):
    d, cfg, w = tiny_model
    model = vkgate.Model.load(ctx, d)
    prompt = [11, 200, 31]
    ids, logprobs = model.generate(prompt, max_new_tokens=4, stop_at_eos=False, temperature=0.8, top_k=20, seed=3,
                                   logprobs=2)
    np.testing.assert_array_equal(ids, model.generate(prompt, max_new_tokens=4, stop_at_eos=False, temperature=0.8,
                                                      top_k=20, seed=3))  # the same draws with whole rows
    assert len(logprobs) == len(ids) == 4
    for i, (chosen, logprob, top) in enumerate(logprobs):
        logits = model.logits(np.concatenate([prompt, ids[:i]]))[-1].astype(np.float64)
        want = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
        assert chosen == ids[i]
        assert logprob == pytest.approx(want[chosen], abs=1e-4)  # a GPU's decode and prefill kernels differ
        assert [want[t] for t, _ in top] == pytest.approx([v for _, v in top], abs=1e-4)
        assert [v for _, v in top] == pytest.approx(sorted(want, reverse=True)[:2], abs=1e-4)
    stream = model.generate("hello world", max_new_tokens=3, stop_at_eos=False, logprobs=0)
    list(stream)
    assert [t[0] for t in stream.logprobs] == stream.ids and all(t[2] == [] for t in stream.logprobs)
    assert model.generate("hello", max_new_tokens=2).logprobs == []
    with pytest.raises(vkgate.Error, match="logprobs"):
        model.generate(prompt, logprobs=21)


def test_generate_refuses_bad_sampling_options(ctx, tiny_model):
    model = vkgate.Model.load(ctx, tiny_model[0])
    for name, value in [("temperature", -1.0), ("top_p", 0.0), ("top_p", 1.5), ("min_p", 2.0), ("top_k", -1),
                        ("repeat_penalty", 0.0), ("presence_penalty", 3.0), ("repeat_last_n", -2), ("seed", -1),
                        ("temperature", "hot"), ("stop", 5)]:
        with pytest.raises(vkgate.Error, match=name):
            model.generate([1, 2], max_new_tokens=2, **{name: value})
    with pytest.raises(vkgate.Error, match="stop"):
        model.generate([1, 2], max_new_tokens=2, stop="x")  # stop strings need text


def test_context_limit(ctx, tmp_path):
    cfg, w = write_model(tmp_path, np.random.default_rng(3), max_position_embeddings=6)
    model = vkgate.Model.load(ctx, tmp_path)
    assert model.context_limit == 6
    assert len(model.generate([1, 2, 3], max_new_tokens=10, stop_at_eos=False)) == 3
    stream = model.generate("hi", max_new_tokens=10, stop_at_eos=False)
    list(stream)
    assert stream.finish_reason == "context_limit" and len(stream.prompt_ids) + len(stream.ids) == 6
    with pytest.raises(vkgate.Error, match="context limit of 6"):
        model.generate([1, 2, 3, 4, 5, 6, 7], max_new_tokens=1)
    with pytest.raises(vkgate.Error, match="7 positions"):
        model.logits([1, 2, 3, 4, 5, 6, 7])
    free = vkgate.Model.load(ctx, tmp_path, ignore_context_limit=True)
    assert free.context_limit == 0
    np.testing.assert_array_equal(free.generate([1, 2, 3], max_new_tokens=10, stop_at_eos=False),
                                  vkgate.reference.greedy_generate(cfg, w, [1, 2, 3], 10, stop_at_eos=False))


def q8_0_values(w):
    """The values ggml's Q8_0 stores for w (quantize_row_q8_0_ref, then dequantized), along the last axis in
    blocks of 32: d = max|x| / 127 kept as fp16, q = round(x / d) halves away from zero, x' = q·d; all fp32."""
    x = np.ascontiguousarray(w, dtype=np.float32).reshape(-1, 32)
    d = np.abs(x).max(axis=1, keepdims=True) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    v = (x * inv).astype(np.float64)
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)
    return (q.astype(np.float32) * d.astype(np.float16).astype(np.float32)).reshape(np.shape(w))


def test_quant_on_load(ctx, tmp_path):
    # Every projection's rows (32 or 64 wide) and lm_head's are whole blocks of 32.
    cfg, w = write_model(tmp_path, np.random.default_rng(21), intermediate_size=64)
    ids = np.array([[3, 100, 7, 42, 0, 250], [5, 5, 9, 250, 1, 17]], dtype=np.int32)
    plain = vkgate.Model.load(ctx, tmp_path)
    model = vkgate.Model.load(ctx, tmp_path, quant="q8_0")
    got = model.logits(ids)
    # The linear weights (ModelOptions::quant: projections and the untied lm_head) as their blocks hold them:
    # against the reference on those values the device's products are as exact as in fp32.
    quantized = [k for k in w if k == "lm_head.weight" or k.endswith("proj.weight")]
    stored = dict(w, **{k: q8_0_values(w[k]) for k in quantized})
    assert_close(got, vkgate.reference.model_forward(cfg, stored, ids)["logits"], NMSE_MODEL_FP32)
    # Against the unquantized run: each quantized product's output takes at most about the relative error of
    # its weights (Q8_0: |Δw| ≤ d/2 per element, d = max|block|/127, ~2e-5 of w's energy here), and the errors
    # of independent products add up, so the logits' NMSE stays below the sum of the 15 weights' NMSEs
    # (a quarter of it, measured over seeds).
    weight_nmse = sum(float(np.sum((stored[k] - w[k]) ** 2) / np.sum(w[k] ** 2)) for k in quantized)
    assert len(quantized) == 15
    assert 0 < nmse(got, plain.logits(ids)) <= weight_nmse
    assert model.memory["weights"] < plain.memory["weights"]
    np.testing.assert_array_equal(vkgate.Model(ctx, cfg, w, quant="Q8_0").logits(ids), got)  # case-insensitive


def test_quant_refuses_a_bad_value(ctx, tiny_model):
    d, cfg, w = tiny_model
    for bad in ("iq3_s", "", "fp16"):
        with pytest.raises(vkgate.Error, match="quant: expected None or one of 'q8_0'.*got '%s'" % bad) as e:
            vkgate.Model.load(ctx, d, quant=bad)
        assert e.value.code == "invalid_argument"
    with pytest.raises(vkgate.Error, match="quant: expected a str"):
        vkgate.Model(ctx, cfg, w, quant=8)


def test_load_gguf(ctx):
    # A GGUF that llama.cpp's llama-quantize wrote (tests/data/gguf/llama_cpp): config, blocks and tokenizer from it.
    path = os.path.join(REPO, "tests", "data", "gguf", "llama_cpp", "qwen3-Q4_K_M.gguf")
    model = vkgate.Model.load(ctx, path)
    assert model.config.model_type == "qwen3" and model.config.vocab_size == 272
    ids = np.array([[0, 271, 5, 100]], dtype=np.int32)
    logits = model.logits(ids)
    assert logits.shape == (1, 4, 272) and np.all(np.isfinite(logits))
    np.testing.assert_array_equal(vkgate.Model.load(ctx, path, quant="q8_0").logits(ids), logits)  # blocks kept
    # Its blocks stay as stored (the Q6_K token_embd too): less device memory than the file itself.
    assert model.memory["weights"] < os.path.getsize(path)
    tok = vkgate.Tokenizer(path)
    stream = model.generate("hello world", max_new_tokens=3, stop_at_eos=False)
    list(stream)
    np.testing.assert_array_equal(stream.ids, model.generate(tok.encode("hello world"), max_new_tokens=3,
                                                             stop_at_eos=False))
