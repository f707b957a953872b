"""Worker processes the benchmarks start: ``python -m bench.workers.<name> --dsn ...``."""
