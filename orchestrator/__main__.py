"""`python -m orchestrator`: the `congruent` command line."""

import sys

from orchestrator.cli import main

sys.exit(main())
