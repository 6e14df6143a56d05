"""A tiny causal language model and its tokenizer, built here from nothing: no download.

The tokenizer is a byte-level BPE trained on a few sentences (every byte is in its alphabet, so
any prompt encodes); the model a two-layer Llama with random weights from a fixed seed. It
writes nonsense, quickly: what a trainer's plumbing needs, not its quality.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from typing import Any  # noqa: E402

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<|pad|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]
CORPUS = [
    "Rivers carry dissolved minerals from rocks into the sea.",
    "Evaporation leaves the salt behind while the water rises as vapour.",
    "Write a short poem about the morning light over the hills.",
    "Explain why the sky is blue in two sentences.",
    "The quick brown fox jumps over the lazy dog.",
    "A good answer is clear, complete and correct.",
]


def tiny_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(
        CORPUS * 4,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=SPECIAL,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        pad_token="<|pad|>",
        eos_token="<|end|>",
        bos_token=None,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def tiny_model(tokenizer: Any, *, seed: int = 0) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def tiny_model_and_tokenizer(*, seed: int = 0) -> tuple[Any, Any]:
    tokenizer = tiny_tokenizer()
    return tiny_model(tokenizer, seed=seed), tokenizer


def save_tiny(path: str, *, seed: int = 0) -> str:
    """Writes the model and tokenizer to ``path`` (a directory ``from_pretrained`` loads)."""
    model, tokenizer = tiny_model_and_tokenizer(seed=seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
