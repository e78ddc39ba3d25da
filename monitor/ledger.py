"""The per-step token ledger (see shared DESIGN.md, "Token ledger").

A step's tokens are the prompt + completion tokens of the model call that produced it. Where a
transcript records them per call (mini-swe-agent's `extra.response.usage`), readers copy them and
mark the step `tokens_estimated=False`. Where it records only run totals (SWE-agent
`info.model_stats`, AutoCodeRover `cost.json`), `fill_estimates` estimates each call from the
growing context (characters / `CHARS_PER_TOKEN` of everything the call was sent, and of what it
answered) and scales the estimates so that the steps sum exactly to the reported totals. The
scaling absorbs what the transcript does not show (calls that were retried, proxy calls, history
elision), so the ledger always adds up to what the run was billed for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from monitor.types import Step

CHARS_PER_TOKEN = 4.0
"""Rough characters per token of English/code text for GPT-style BPE vocabularies."""

PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-2024-05-13": (5.0, 15.0),
    "gpt-4o": (5.0, 15.0),
    "gpt-4-0125-preview": (10.0, 30.0),
    "gpt-4-1106-preview": (10.0, 30.0),
    "claude-3-5-sonnet-20240620": (3.0, 15.0),
    "claude-3-5-sonnet-20241022": (3.0, 15.0),
    "claude-3.5-sonnet": (3.0, 15.0),
    "claude-3-5-sonnet": (3.0, 15.0),
}
"""List prices in USD per million (prompt, completion) tokens, as the providers published them
when the runs in ../shared/data were made (mid 2024); used to turn a per-call dollar cost into
tokens where a transcript records nothing else (Moatless 2024-06). "gpt-4o" is the June 2024
alias of gpt-4o-2024-05-13; OpenRouter's "claude-3.5-sonnet" is Anthropic's model at its price."""


def price_of(model: str) -> tuple[float, float] | None:
    """(prompt, completion) USD per million tokens of `model`, None when unknown.

    A provider prefix ("openai/gpt-4o", "anthropic/claude-...") is ignored.
    """
    return PRICES.get(model.rsplit("/", 1)[-1].strip().lower())


def scale_to_total(weights: Sequence[float], total: int) -> list[int]:
    """Integers proportional to `weights` that sum exactly to `total` (largest remainder).

    Args:
        weights: non-negative weights, one per part.
        total: the sum the parts must have (>= 0).

    Returns:
        One non-negative int per weight; all-zero weights split `total` evenly. Exact for any
        size of `total` (a transcript may claim absurd totals such as 1e308 tokens).

    Raises:
        ValueError: a weight or `total` is NaN or infinite.
    """
    n = len(weights)
    if n == 0:
        return []
    if isinstance(total, float) and not math.isfinite(total):
        raise ValueError(f"total must be a finite number, got {total}")
    if any(not math.isfinite(float(x)) for x in weights):
        raise ValueError("weights must be finite numbers")
    total = max(int(total), 0)
    # Exact rationals: float products overflow for huge totals (a transcript can claim 1e308
    # tokens) and rounding could make the floors sum past `total`.
    w = [Fraction(max(float(x), 0.0)) for x in weights]
    s = sum(w, Fraction(0))
    if s <= 0:
        w, s = [Fraction(1)] * n, Fraction(n)
    exact = [x * total / s for x in w]
    parts = [math.floor(x) for x in exact]
    short = total - sum(parts)
    # Hand the remaining units to the largest fractional parts (ties: earliest step).
    order = sorted(range(n), key=lambda i: (parts[i] - exact[i], i))
    for i in order[:short]:
        parts[i] += 1
    return parts


def fill_estimates(
    steps: Sequence[Step],
    context_chars: Sequence[int],
    output_chars: Sequence[int],
    *,
    total_in: int | None = None,
    total_out: int | None = None,
    chars_per_token: float = CHARS_PER_TOKEN,
) -> None:
    """Fill tokens_in/out of the steps that have no recorded usage (in place).

    Steps with `tokens_estimated=False` keep their recorded figures; the others get
    `context_chars[i] / chars_per_token` prompt tokens and `output_chars[i] / chars_per_token`
    completion tokens, scaled so that all steps together sum to `total_in` / `total_out` when
    those are given (the recorded steps' tokens are subtracted first).

    Args:
        steps: the run's steps, in order.
        context_chars: per step, characters of everything sent to the model for that call.
        output_chars: per step, characters of the model's answer.
        total_in: the run's reported prompt tokens, None when not reported.
        total_out: the run's reported completion tokens, None when not reported.
        chars_per_token: characters per token for the raw estimate.
    """
    if len(context_chars) != len(steps) or len(output_chars) != len(steps):
        raise ValueError("one context and one output size per step")
    todo = [i for i, s in enumerate(steps) if s.tokens_estimated]
    if not todo:
        return
    for total, attr, chars in (
        (total_in, "tokens_in", context_chars),
        (total_out, "tokens_out", output_chars),
    ):
        raw = [chars[i] / chars_per_token for i in todo]
        if total is None:
            values = [round(x) for x in raw]
        else:
            known = sum(getattr(s, attr) for s in steps if not s.tokens_estimated)
            values = scale_to_total(raw, max(total - known, 0))
        for i, v in zip(todo, values, strict=True):
            setattr(steps[i], attr, int(v))


class StepLedger:
    """A run's steps as a reader builds them, one at a time, with what `fill_estimates` needs
    for each: the characters the model had been sent before the step's call (`seen` then) and
    the characters it wrote for it. Readers add what else the model was sent to `seen`."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.ctx: list[int] = []  # characters the model had been sent before each step's call
        self.out: list[int] = []  # characters the model wrote for each step
        self.seen = 0  # characters the model has been sent so far

    def append(self, step: Step, out: int) -> None:
        """Append `step` (its index set); the model wrote `out` characters for it."""
        step.index = len(self.steps)
        self.steps.append(step)
        self.ctx.append(self.seen)
        self.out.append(out)
        self.seen += out

    def estimate(self, *, total_in: int | None = None, total_out: int | None = None) -> list[Step]:
        """The steps, those with no recorded usage estimated (`fill_estimates`)."""
        fill_estimates(self.steps, self.ctx, self.out, total_in=total_in, total_out=total_out)
        return self.steps

    def estimate_step(self, step: Step) -> None:
        """`step`'s estimate alone (a live reader that settles its steps one at a time)."""
        fill_estimates([step], [self.ctx[step.index]], [self.out[step.index]])


def charge(steps: Sequence[Step], tokens_in: int, tokens_out: int) -> None:
    """One model call's recorded usage on the steps it made: all of it on the first, 0 on the
    others (its parallel calls), none of them estimated."""
    for k, step in enumerate(steps):
        step.tokens_in, step.tokens_out = (tokens_in, tokens_out) if k == 0 else (0, 0)
        step.tokens_estimated = False
