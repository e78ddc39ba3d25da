"""`failfast supervise`: run an agent, watch its transcript, stop and warm-restart it.

    from serving.supervise import Supervisor, SuperviseConfig
    result = Supervisor(SuperviseConfig(cmd=[...], transcript="run.jsonl"), monitor).run()

Modules: `git.py` (the work tree's diff and its reset), `budget.py` (budgets across attempts),
`packet.py` (the restart packet and prompt), `runner.py` (the attempts and the process group).
"""

from serving.supervise.budget import Budgets
from serving.supervise.runner import SuperviseConfig, Supervisor

__all__ = ["Budgets", "SuperviseConfig", "Supervisor"]
