"""vkgate.Tokenizer on the hand-made tokenizer.json of the C++ tests."""
import pytest

import vkgate
from conftest import TOKENIZER_JSON


def test_round_trip_and_lookups():
    tok = vkgate.Tokenizer(TOKENIZER_JSON)
    text = "Hello, world! It's 2025."
    ids = tok.encode(text, add_special_tokens=False)
    assert ids and all(isinstance(i, int) for i in ids)
    assert tok.decode(ids) == tok.normalize(text)
    assert tok.encode(text) == [tok.token_to_id("<|bos|>")] + ids  # its post-processor's template
    assert tok.token_to_id("<|end|>") == 269 and tok.is_special(269)
    assert tok.id_to_token(269) == "<|end|>" and tok.id_to_token(10**9) is None
    assert tok.vocab_size > 200 and tok.source.endswith("qwen_style.json")
    assert tok.token_to_id("no such token") is None
    assert tok.decode([]) == ""


def test_from_json_and_errors(tmp_path):
    with open(TOKENIZER_JSON) as f:
        tok = vkgate.Tokenizer.from_json(f.read(), "mine.json")
    assert tok.source == "mine.json"
    with pytest.raises(vkgate.Error) as e:
        tok.decode([10**6])
    assert e.value.code == "invalid_argument"
    with pytest.raises(vkgate.Error) as e:
        tok.decode([-1])
    assert e.value.code == "invalid_argument" and "ids[0]" in str(e.value)
    with pytest.raises(vkgate.Error) as e:
        vkgate.Tokenizer(tmp_path / "missing.json")
    assert e.value.code == "io"
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(vkgate.Error) as e:
        vkgate.Tokenizer(tmp_path / "bad.json")
    assert e.value.code == "io" and "bad.json" in str(e.value)
