"""pgqueue's benchmark suite: ``python -m bench --help``."""
