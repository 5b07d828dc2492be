"""Fuzzing the decoders: the registry of formats (``registry``), the hostile mutations
(``mutations``), the contract check (``harness``) and the long run (``python -m
tests.fuzz``). The bounded runs are tests/engine/test_fuzz_*.py."""
