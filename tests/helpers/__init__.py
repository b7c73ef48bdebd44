"""What tests share: helper functions and constants that used to live in test modules (so no
test module imports another one). tests/ is on sys.path (pyproject's pytest `pythonpath`), so
modules import this as `helpers.<module>`; package-local helpers (tests/sim/helpers.py, ...)
stay beside the tests that use them."""
