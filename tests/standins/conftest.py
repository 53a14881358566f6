"""Fixtures of the stand-in tests (tests/standins/): none of their own; the shared ones are in tests/conftest.py."""
