"""TRL's DPOTrainer on an arena export of image battles, with a tiny vision-language model.

``python dpo_vision.py --data FOLDER --out result.json`` loads the export folder (the
``trl-vision`` format, Parquet, with its dataset card) with ``datasets``, builds a LLaVA model
and processor from nothing (the tiny tokenizer of ``tiny.py``, a one-layer CLIP vision tower,
random weights from a fixed seed; no download), and trains one DPO step on the rows. The result
file says what TRL saw: the rows and their image sizes, the pixel values its vision collator
built, and the step's loss and gradient norm.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny import tiny_tokenizer  # noqa: E402

IMAGE_TOKEN = "<image>"
# The tiny tokenizer's template, with content parts: TRL turns every message's content into
# parts and puts an image part before the first user message's text.
TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>{% else %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tiny_vision_model() -> tuple[Any, Any]:
    """A LLaVA processor and model small enough to train a step on the CPU in a second."""
    import torch
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tokenizer = tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    images = CLIPImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16})
    processor = LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer,
        patch_size=8,
        vision_feature_select_strategy="default",
        chat_template=TEMPLATE,
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,
    )
    vision = CLIPVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=16,
        patch_size=8,
        projection_dim=16,
    )
    text = LlamaConfig(
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
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(0)
    return processor, LlavaForConditionalGeneration(config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="an export folder (trl-vision, Parquet)")
    parser.add_argument("--out", required=True, help="where the result JSON goes")
    args = parser.parse_args(argv)

    import datasets
    from trl import DPOConfig, DPOTrainer
    from trl.trainer.dpo_trainer import DataCollatorForVisionPreference

    train = datasets.load_dataset(args.data, split="train", cache_dir=str(Path(args.out).parent))
    processor, model = tiny_vision_model()
    batch = DataCollatorForVisionPreference(processor)([dict(row) for row in train])
    config = DPOConfig(
        output_dir=str(Path(args.out).parent / "dpo-vision"),
        per_device_train_batch_size=len(train),
        max_steps=1,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        max_length=None,
        gradient_checkpointing=False,
    )
    trainer = DPOTrainer(
        model=model,
        ref_model=copy.deepcopy(model),
        args=config,
        train_dataset=train,
        processing_class=processor,
    )
    result = trainer.train()
    logged = next(entry for entry in trainer.state.log_history if "grad_norm" in entry)
    Path(args.out).write_text(
        json.dumps(
            {
                "rows": train.num_rows,
                "features": str(train.features["images"]),
                "image_sizes": [[list(image.size) for image in row["images"]] for row in train],
                "vision_dataset": trainer._is_vision_dataset,
                "pixel_values": list(batch["pixel_values"].shape),
                "loss": result.training_loss,
                "grad_norm": float(logged["grad_norm"]),
            }
        )
    )
    print(f"dpo-vision: {train.num_rows} rows, loss {result.training_loss:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
