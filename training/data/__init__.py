"""Data stage: labelled runs, instance splits, prefix examples and the per-run score records."""
