"""Fixtures of the tests of the report views (tests/views/): none of their own yet; they use the shared ones of tests/conftest.py.

A fixture only this folder's tests use goes here, not in a test module (tests/README.md)."""
