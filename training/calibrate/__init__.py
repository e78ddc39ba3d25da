"""Calibrate stage: run-level stop thresholds picked on validation records, with an FPR bound.

What is fitted here is served through monitor.thresholds (the typed thresholds.json and its one
lookup) under monitor.schedule (the check schedule).
"""
