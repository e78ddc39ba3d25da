"""Export stage: ONNX graphs of a trained classifier, the serving bundle (docs/BUNDLE.md) and its
model card."""
