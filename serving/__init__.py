"""Serving: onnxruntime scorer (no torch), incremental sessions, HTTP service, harness hooks."""
