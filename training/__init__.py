"""Training, calibration, evaluation and export, in the order the pipeline runs them.

- config: the pipeline config (configs/*.yaml), one class per section.
- data: labelled runs, instance splits, prefix examples, per-run score records.
- model: backbone, one-pass boundary features and their cache, classifier, probe, fine-tuning.
- baselines: learned (signals, TF-IDF) and replayed rules (halts, budgets, LoopBrake).
- calibrate: run-level stop thresholds with an FPR bound (monitor.thresholds is what they fill).
- evaluate: token ledger, AUROC, the report against baselines and the oracle, plots.
- export: ONNX graphs and the serving bundle (docs/BUNDLE.md).
- pipeline: the stage functions and the jobs built from them (`failfast train`, `failfast demo`).
- experiments: research on top of the stages (transfer, ablations); the library never imports it.
- cli: the `failfast` command (monitor, serving and training subcommands).

A package imports only those above it in this list (tests/test_imports.py).
"""
