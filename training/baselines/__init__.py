"""Baselines on the monitor's splits: learned ones (signals and TF-IDF logistic regressions) and
rules replayed on recorded runs (heuristic halts, p95 budgets, LoopBrake)."""
