"""The three heads: a probe on frozen features, LoRA on the top layers, and full fine-tuning.

- `fit_probe`: L2 logistic regression (scikit-learn) on [hidden ; standardised signals ; agent
  one-hot], folded into PrefixClassifier.head. The agent columns absorb each agent's base failure
  rate while fitting, so the other weights learn what separates runs WITHIN an agent; they are
  then dropped (their weighted mean goes into the bias). Within one agent this only shifts every
  logit by a constant, so per-agent rankings, AUROC and per-agent thresholds are unchanged.
- `finetune`: LoRA (peft, top layers) or all weights, trained with the transformers Trainer
  (only `compute_loss` overridden), so `accelerate launch` / `torchrun` runs it data-parallel.
  The head starts from the probe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression

from training.config import TrainConfig
from training.model import PrefixClassifier

log = logging.getLogger(__name__)


@dataclass
class ProbeFit:
    """What fit_probe learned (already copied into the model's head).

    Attributes:
        C: the inverse regularisation strength used.
        hidden_scale: the scale of the standardised hidden columns (see fit_probe).
        agent_offsets: agent -> logit offset learned and dropped from the exported head.
        train_loss: weighted log loss on the training examples (fitted head, agents included).
        initial_loss: the same loss for a zero head (log 2).
    """

    C: float
    hidden_scale: float = 1.0
    agent_offsets: dict[str, float] = field(default_factory=dict)
    train_loss: float = 0.0
    initial_loss: float = float(np.log(2.0))


def _std(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = np.average(x, axis=0, weights=w)
    std = np.sqrt(np.average((x - mean) ** 2, axis=0, weights=w))
    return mean, np.where(std > 1e-6, std, 1.0)


def _log_loss(p: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(np.average(-(y * np.log(p) + (1 - y) * np.log(1 - p)), weights=w))


def fit_probe(
    model: PrefixClassifier,
    hidden: np.ndarray,
    signals: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    agents: Sequence[str],
    *,
    C: float = 0.1,
    hidden_scale: float = 1.0,
    agent_columns: bool = True,
    max_iter: int = 500,
) -> ProbeFit:
    """Fit the head of `model` on frozen features (in place).

    Args:
        model: the classifier; its head and signal buffers are overwritten.
        hidden: (N, H) boundary hidden states.
        signals: (N, S) raw signal values (S = model.n_signals; may be 0 columns).
        labels: (N,) 1 = unresolved.
        weights: (N,) example weights.
        agents: (N,) agent of each example's run.
        C: inverse L2 strength of the logistic regression.
        hidden_scale: the standardised hidden columns are multiplied by this before fitting, so
            their L2 penalty is 1 / hidden_scale**2 times that of the signal columns (hundreds
            of hidden dimensions overfit a few thousand runs; the signals do not).
        agent_columns: add agent one-hot columns while fitting (see module docstring).
        max_iter: lbfgs iterations.
    """
    w = np.asarray(weights, dtype=np.float64)
    w = w * len(w) / w.sum()
    y = np.asarray(labels, dtype=np.int64)
    h_mean, h_std = _std(hidden, w)
    h_std = h_std / hidden_scale
    if model.signal_transform == "asinh":
        signals = np.arcsinh(signals)
    s_mean, s_std = _std(signals, w) if signals.shape[1] else (np.zeros(0), np.ones(0))
    names = sorted(set(agents)) if agent_columns else []
    onehot = np.zeros((len(y), len(names)))
    if names:
        col = {a: j for j, a in enumerate(names)}
        onehot[np.arange(len(y)), [col[a] for a in agents]] = 1.0
    x = np.hstack([(hidden - h_mean) / h_std, (signals - s_mean) / s_std, onehot])
    lr = LogisticRegression(C=C, max_iter=max_iter)
    lr.fit(x, y, sample_weight=w)
    coef = lr.coef_[0]
    hdim, sdim = hidden.shape[1], signals.shape[1]
    c_h, c_s, c_a = coef[:hdim], coef[hdim : hdim + sdim], coef[hdim + sdim :]
    share = onehot.T @ w / w.sum() if names else np.zeros(0)
    bias = float(lr.intercept_[0] - np.sum(c_h * h_mean / h_std) + float(share @ c_a))
    with torch.no_grad():
        model.head.weight.copy_(
            torch.tensor(np.concatenate([c_h / h_std, c_s])[None], dtype=torch.float32)
        )
        model.head.bias.fill_(bias)
        model.signal_mean.copy_(torch.tensor(s_mean, dtype=torch.float32))
        model.signal_std.copy_(torch.tensor(s_std, dtype=torch.float32))
    offsets = {a: float(c - share @ c_a) for a, c in zip(names, c_a, strict=True)}
    return ProbeFit(C, hidden_scale, offsets, _log_loss(lr.predict_proba(x)[:, 1], y, w))


def select_probe(
    model: PrefixClassifier,
    hidden: np.ndarray,
    signals: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    agents: Sequence[str],
    *,
    pairs: Sequence[tuple[float, float]],
    agent_columns: bool = True,
    val_criterion: Callable[[], tuple[float, Any]] | None = None,
) -> tuple[ProbeFit, dict[str, dict[str, Any]], float | None]:
    """Fit the probe for every (C, hidden_scale) pair and keep the best head on validation.

    Args:
        model, hidden, signals, labels, weights, agents, agent_columns: as for `fit_probe`.
        pairs: the (C, hidden_scale) grid, fitted in this order.
        val_criterion: scores the head just fitted on validation runs -> (criterion, details);
            higher is better. None: no selection, so `pairs` must hold one pair.

    Returns:
        (the kept fit, {"C=..,hidden_scale=..": {"C", "hidden_scale", "criterion",
        "val_mean_per_agent_auroc" (the details), "train_loss"}}, the kept criterion).
    """
    if len(pairs) > 1 and val_criterion is None:
        raise ValueError("select_probe: a grid of more than one (C, scale) needs validation runs")
    best: tuple[float, dict[str, torch.Tensor], ProbeFit, float | None] | None = None
    selection: dict[str, dict[str, Any]] = {}
    for c, scale in pairs:
        fit = fit_probe(
            model,
            hidden,
            signals,
            labels,
            weights,
            agents,
            C=c,
            hidden_scale=scale,
            agent_columns=agent_columns,
        )
        crit, details = val_criterion() if val_criterion is not None else (None, None)
        selection[f"C={c:g},hidden_scale={scale:g}"] = {
            "C": c,
            "hidden_scale": scale,
            "criterion": crit,
            "val_mean_per_agent_auroc": details,
            "train_loss": fit.train_loss,
        }
        log.info(
            "probe C=%g hidden_scale=%g: train loss %.4f, val criterion %s",
            c,
            scale,
            fit.train_loss,
            "-" if crit is None else f"{crit:.4f}",
        )
        if best is None or (crit is not None and crit > best[0]):
            head = {
                k: v.clone() for k, v in model.state_dict().items() if not k.startswith("backbone.")
            }
            best = (crit if crit is not None else 0.0, head, fit, crit)
    if best is None:
        raise ValueError("select_probe: empty (C, hidden_scale) grid")
    with torch.no_grad():
        model.load_state_dict(best[1], strict=False)
    return best[2], selection, best[3]


def head_scores(model: PrefixClassifier, hidden: np.ndarray, signals: np.ndarray) -> np.ndarray:
    """sigmoid(head) for boundary states (N, H) and raw signals (N, S) -> (N,) float64."""
    with torch.no_grad():
        logits = model.head_logits(
            torch.from_numpy(np.ascontiguousarray(hidden, dtype=np.float32))[None],
            torch.from_numpy(np.ascontiguousarray(signals, dtype=np.float32))[None],
        )
    return torch.sigmoid(logits[0]).double().numpy()


# ---- fine-tuning (LoRA / full) through the transformers Trainer ---------------------------------


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


def add_lora(
    model: PrefixClassifier,
    *,
    r: int,
    alpha: int,
    dropout: float,
    top_layers: int,
    target_modules: Sequence[str],
) -> None:
    """Wrap the backbone with LoRA adapters on its top `top_layers` layers (in place)."""
    from peft import LoraConfig, get_peft_model

    n = int(model.backbone.config.num_hidden_layers)
    top = min(max(top_layers, 1), n)
    cfg = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=list(target_modules),
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
    """Fine-tune `model` with every train.* setting of `tc`: LoRA adapters on the top layers
    (head "lora", merged back afterwards) or all weights (head "full"). Returns the logged
    losses; the model is left in training mode, in the dtype it was tuned in."""
    if head == "lora":
        add_lora(
            model,
            r=tc.lora_r,
            alpha=tc.lora_alpha,
            dropout=tc.lora_dropout,
            top_layers=tc.lora_top_layers,
            target_modules=tc.lora_targets,
        )
    model.train()
    losses = finetune(
        model,
        windows,
        out_dir=out_dir,
        epochs=tc.epochs,
        max_steps=tc.max_steps,
        lr=tc.lr,
        batch_size=tc.batch_size,
        grad_accum=tc.grad_accum,
        weight_decay=tc.weight_decay,
        warmup_steps=tc.warmup_steps,
        seed=tc.seed,
        bf16=tc.bf16,
        gradient_checkpointing=tc.gradient_checkpointing,
        save_steps=tc.save_steps,
        progress=tc.progress,
    )
    merge_lora(model)
    return losses


def finetune(
    model: PrefixClassifier,
    examples: list[dict[str, Any]],
    *,
    out_dir: str | Path,
    epochs: float = 1.0,
    max_steps: int = -1,
    lr: float = 1e-4,
    batch_size: int = 4,
    grad_accum: int = 1,
    weight_decay: float = 0.0,
    warmup_steps: int = 0,
    seed: int = 0,
    bf16: bool = False,
    gradient_checkpointing: bool = False,
    logging_steps: int = 10,
    save_steps: int = 0,
    progress: bool = True,
) -> list[float]:
    """Train `model` (LoRA-wrapped or not) on window examples; returns the logged losses.

    Examples are dicts with input_ids, positions, signals, labels, weights (see `collate`).
    Parameters with requires_grad=False (the frozen base under LoRA) stay fixed.
    """
    from transformers import TrainingArguments

    if gradient_checkpointing and hasattr(model.backbone, "gradient_checkpointing_enable"):
        model.backbone.gradient_checkpointing_enable()
    args = TrainingArguments(
        output_dir=str(out_dir),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=grad_accum,
        num_train_epochs=epochs,
        max_steps=max_steps,
        learning_rate=lr,
        weight_decay=weight_decay,
        warmup_steps=warmup_steps,
        lr_scheduler_type="linear",
        logging_steps=logging_steps,
        save_strategy="steps" if save_steps > 0 else "no",
        save_steps=max(save_steps, 1),
        seed=seed,
        bf16=bf16,
        use_cpu=not torch.cuda.is_available(),
        remove_unused_columns=False,
        label_names=["labels"],
        report_to=[],
        disable_tqdm=not progress,
        dataloader_num_workers=0,
    )
    trainer = _trainer_class()(
        model=model, args=args, train_dataset=examples, data_collator=collate
    )
    trainer.train()
    return [float(h["loss"]) for h in trainer.state.log_history if "loss" in h]
