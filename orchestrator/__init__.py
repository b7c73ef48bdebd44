"""orch: sweep server flags on PD inference clusters and report which flag causes what."""

__version__ = "0.1.0"
