"""The SmolLM2 tokenizer rebuilt from the GGUF's metadata: round trips, special tokens taken from
the file, and a chat template identical to the one the GGUF ships (rendered with jinja2)."""

from __future__ import annotations

import pytest

from workloads import tokenizer as tok_mod


def test_tokenizer_round_trips_text():
    loaded = tok_mod.load("smollm2-135m")
    for text in [
        "Hello world!",
        "The year 2024 costs $3.50",
        "  two spaces\n\nand\ttabs",
        "naïve café 日本語 🙂",
    ]:
        assert loaded.decode(loaded.encode(text)) == text
    assert loaded.vocab_size == 49152
    assert loaded.encode("2024") == [loaded.encode(d)[0] for d in "2024"]  # digits split one by one
    assert tok_mod.load_tokenizer() is loaded.tokenizer


def test_tokenizer_special_tokens_come_from_the_gguf():
    loaded = tok_mod.load("smollm2-135m")
    specials = tok_mod.special_token_ids()
    assert loaded.encode("<|im_start|><|im_end|>") == [1, 2] and {1, 2} <= specials
    assert (loaded.bos_token_id, loaded.eos_token_id) == (1, 2)
    first = tok_mod.first_ordinary_id()
    assert first not in specials and all(i < first for i in specials)
    ordinary = loaded.encode("What is the capital of France? 123")
    assert not set(ordinary) & specials and min(ordinary) >= first
    with pytest.raises(ValueError, match="valid: smollm2-135m"):
        tok_mod.load("gpt5")


def test_chat_template_matches_the_gguf_template():
    import jinja2  # torch's own dependency

    loaded = tok_mod.load("smollm2-135m")
    template = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(
        loaded.chat_template
    )
    conversations = [
        [{"role": "user", "content": "What is the capital of France?"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "2+2?"},
        ],
    ]
    for messages in conversations:
        text = template.render(messages=messages, add_generation_prompt=True)
        assert tok_mod.render_chatml(messages) == text
        ids = tok_mod.apply_chat_template(messages)
        assert ids == loaded.encode(text)
        assert ids[:2] == [1] + loaded.encode("system") and ids[-4:] == [1] + loaded.encode(
            "assistant\n"
        )
        assert ids.count(2) == len(messages) + (messages[0]["role"] != "system")
