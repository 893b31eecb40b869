"""Command-line orchestration: the `congruent` entry point and its subcommands."""
