"""Training: prefix features, classifier heads, baselines, thresholds, evaluation, export."""
