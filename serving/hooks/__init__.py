"""Harness hooks: a mini-swe-agent agent wrapper and a Claude Code command hook."""
