"""Research experiments (cross-agent transfer, ablations) on top of the pipeline's stages.

Nothing in the library imports this package (tests/test_imports.py checks it), so experiments
can depend on every stage without an import cycle.
"""
