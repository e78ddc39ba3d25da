"""The second probe (train.text_candidate, candidate "monitor_text") on the classifier: its
served form (`TextProbe`, in training.model.classifier) from the fitted twin (its scores:
training.model.probe.head_scores with `second=True`).

The second probe is fitted on a twin classifier (the same backbone, its own head and signal
standardisation: training.pipeline.text_probe); `fold_text_probe` rewrites its signal weights for
the first head's standardisation, so the graphs compute one head input for both heads.
"""

from __future__ import annotations

import torch

from training.model.classifier import PrefixClassifier, TextProbe


def fold_text_probe(model: PrefixClassifier, other: PrefixClassifier) -> TextProbe:
    """`other`'s fitted head and text part as `model`'s second probe.

    `other` reads the same features with its own signal standardisation; its signal weights and
    bias are rewritten for `model`'s (w (x - m2) / s2 = (w s1 / s2) (x - m1) / s1 +
    w (m1 - m2) / s2), so both heads read one input in the graphs.
    """
    if other.text_head is None:
        raise ValueError("fold_text_probe: the second probe has no text part")
    with torch.no_grad():
        w = other.head.weight.detach().double()[0].clone()
        b = float(other.head.bias.detach().double()[0])
        if model.n_signals:
            m1, s1 = model.signal_mean.double(), model.signal_std.double()
            m2, s2 = other.signal_mean.double(), other.signal_std.double()
            ws = w[model.n_features :]
            b += float(torch.sum(ws * (m1 - m2) / s2))
            w[model.n_features :] = ws * s1 / s2
        head = torch.nn.Linear(w.numel(), 1)
        head.weight.copy_(w[None].float())
        head.bias.fill_(b)
    return TextProbe(head.eval(), other.text_head)
