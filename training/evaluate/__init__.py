"""Evaluate stage: the offline token ledger, AUROC per agent, the report of the monitor against
the baselines and the oracle, and its plots."""
