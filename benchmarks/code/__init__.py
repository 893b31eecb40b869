"""The code itself: a walk of `congruent run` through the modules (docs/architecture.md), the reliability
figures (docs/reliability.md), the report's screenshot."""
