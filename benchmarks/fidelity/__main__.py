"""python -m benchmarks.fidelity [--quick|--full] [--seeds N] [--out docs/benchmarks/fidelity.md]"""

from benchmarks.fidelity.cli import main

main()
