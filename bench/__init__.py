"""mpwatch's benchmarks: `python -m bench` runs every bench/bench_*.py and rewrites BENCHMARKS.md.

Each bench module exposes `run(quick: bool = False) -> list[dict]`, one dict per table row
(see `bench.harness.row`). Benchmarks are not tests: they measure, print and record; only
`tests/test_bench.py` runs the harness, at its smallest size, so it cannot rot.
"""
