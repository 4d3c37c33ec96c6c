"""benchgate: pinned vLLM upgrades, re-benchmarked and rolled back when slower."""

__version__ = "0.1.0"
