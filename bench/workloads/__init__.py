"""One module per workload; each exposes ``run(...) -> dict`` (the JSON result)."""
