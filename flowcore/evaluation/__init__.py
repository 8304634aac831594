"""Scoring workflows on benchmarks: evaluate, the comparison protocol (splits, repeats, paired tests),
statistics, self-explaining results and stored evaluations."""
