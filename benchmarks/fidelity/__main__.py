"""python -m benchmarks.fidelity [--quick|--full] [--seeds N] [--out docs/benchmarks.md]"""

from benchmarks.fidelity.cli import main

main()
