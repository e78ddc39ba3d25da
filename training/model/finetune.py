"""Fine-tuning heads: LoRA on the top layers (peft) or every weight, through the transformers Trainer.

Only `compute_loss` is overridden, so `accelerate launch` / `torchrun` run it data-parallel. The
head starts from the probe (training.model.probe), fitted on frozen features first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from training.config import TrainConfig
from training.model.classifier import PrefixClassifier


def collate(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Pad window examples: ids/mask to the longest window, positions/labels/weights/signals to
    the most boundaries (padded boundaries get weight 0)."""
    t = max(len(it["input_ids"]) for it in items)
    p = max(len(it["positions"]) for it in items)
    s = len(items[0]["signals"][0]) if items[0]["signals"] else 0
    b = len(items)
    out = {
        "input_ids": torch.zeros((b, t), dtype=torch.long),
        "attention_mask": torch.zeros((b, t), dtype=torch.long),
        "positions": torch.zeros((b, p), dtype=torch.long),
        "signals": torch.zeros((b, p, s), dtype=torch.float32),
        "labels": torch.zeros((b, p), dtype=torch.float32),
        "weights": torch.zeros((b, p), dtype=torch.float32),
    }
    for i, it in enumerate(items):
        n, m = len(it["input_ids"]), len(it["positions"])
        out["input_ids"][i, :n] = torch.tensor(it["input_ids"])
        out["attention_mask"][i, :n] = 1
        out["positions"][i, :m] = torch.tensor(it["positions"])
        if s:
            out["signals"][i, :m] = torch.tensor(it["signals"], dtype=torch.float32)
        out["labels"][i, :m] = torch.tensor(it["labels"], dtype=torch.float32)
        out["weights"][i, :m] = torch.tensor(it["weights"], dtype=torch.float32)
    return out


def _trainer_class() -> type:
    from transformers import Trainer

    class PrefixTrainer(Trainer):
        """Trainer with a weighted BCE over the step boundaries of each window."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            logits = model(
                inputs["input_ids"],
                inputs["attention_mask"],
                inputs["positions"],
                inputs["signals"],
            )
            bce = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, inputs["labels"], reduction="none"
            )
            w = inputs["weights"]
            loss = (bce * w).sum() / w.sum().clamp_min(1e-8)
            return (loss, {"logits": logits}) if return_outputs else loss

    return PrefixTrainer


def add_lora(model: PrefixClassifier, tc: TrainConfig) -> None:
    """Wrap the backbone with LoRA adapters (tc.lora_*) on its top tc.lora_top_layers layers
    (in place)."""
    from peft import LoraConfig, get_peft_model

    n = int(model.backbone.config.num_hidden_layers)
    top = min(max(tc.lora_top_layers, 1), n)
    cfg = LoraConfig(
        r=tc.lora_r,
        lora_alpha=tc.lora_alpha,
        lora_dropout=tc.lora_dropout,
        target_modules=list(tc.lora_targets),
        layers_to_transform=list(range(n - top, n)),
        layers_pattern="layers",
    )
    model.backbone = get_peft_model(model.backbone, cfg)


def merge_lora(model: PrefixClassifier) -> None:
    """Fold LoRA adapters into the backbone weights (in place) so it saves as a plain HF folder."""
    if hasattr(model.backbone, "merge_and_unload"):
        model.backbone = model.backbone.merge_and_unload()


def tune_backbone(
    model: PrefixClassifier,
    windows: list[dict[str, Any]],
    tc: TrainConfig,
    *,
    head: str,
    out_dir: str | Path,
) -> list[float]:
    """Fine-tune `model` with the train.* settings of `tc`: LoRA adapters on the top layers
    (head "lora", merged back afterwards) or all weights (head "full"). Returns the logged
    losses; the model is left in training mode, in the dtype it was tuned in."""
    if head == "lora":
        add_lora(model, tc)
    model.train()
    losses = finetune(model, windows, tc, out_dir=out_dir)
    merge_lora(model)
    return losses


def finetune(
    model: PrefixClassifier,
    examples: list[dict[str, Any]],
    tc: TrainConfig,
    *,
    out_dir: str | Path,
    logging_steps: int = 10,
) -> list[float]:
    """Train `model` (LoRA-wrapped or not) on window examples with the optimiser settings of
    `tc` (epochs, max_steps, lr, batch_size, ...); returns the logged losses.

    Examples are dicts with input_ids, positions, signals, labels, weights (see `collate`).
    Parameters with requires_grad=False (the frozen base under LoRA) stay fixed.
    """
    from transformers import TrainingArguments

    if tc.gradient_checkpointing and hasattr(model.backbone, "gradient_checkpointing_enable"):
        model.backbone.gradient_checkpointing_enable()
    args = TrainingArguments(
        output_dir=str(out_dir),
        per_device_train_batch_size=tc.batch_size,
        gradient_accumulation_steps=tc.grad_accum,
        num_train_epochs=tc.epochs,
        max_steps=tc.max_steps,
        learning_rate=tc.lr,
        weight_decay=tc.weight_decay,
        warmup_steps=tc.warmup_steps,
        lr_scheduler_type="linear",
        logging_steps=logging_steps,
        save_strategy="steps" if tc.save_steps > 0 else "no",
        save_steps=max(tc.save_steps, 1),
        seed=tc.seed,
        bf16=tc.bf16,
        use_cpu=not torch.cuda.is_available(),
        remove_unused_columns=False,
        label_names=["labels"],
        report_to=[],
        disable_tqdm=not tc.progress,
        dataloader_num_workers=0,
    )
    trainer = _trainer_class()(
        model=model, args=args, train_dataset=examples, data_collator=collate
    )
    trainer.train()
    return [float(h["loss"]) for h in trainer.state.log_history if "loss" in h]
