"""Model stage: the backbone, the one-pass boundary features and their cache, the probe, the
fine-tuning heads and the out-of-fold probe scores."""
