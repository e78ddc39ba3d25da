"""`python -m training.cli ...` (what `accelerate launch -m` and `torchrun -m` run)."""

import sys

from training.cli import main

sys.exit(main())
