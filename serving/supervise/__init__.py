"""`failfast supervise`: run an agent, watch its transcript, stop and warm-restart it.

    from serving.supervise import Supervisor, SuperviseConfig
    result = Supervisor(SuperviseConfig(cmd=[...], transcript="run.jsonl"), monitor).run()

Modules: `git.py` (the work tree's diff and its reset), `budget.py` (budgets across attempts),
`packet.py` (the restart packet and prompt), `config.py` (the flags), `attempt.py` (one attempt:
the agent's process group, its watch, its stop), `runner.py` (the attempts, resets and summary).
"""

from serving.supervise.budget import Budgets
from serving.supervise.config import SuperviseConfig
from serving.supervise.runner import Supervisor

__all__ = ["Budgets", "SuperviseConfig", "Supervisor"]
