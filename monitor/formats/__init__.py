"""Readers, one module per transcript format."""
