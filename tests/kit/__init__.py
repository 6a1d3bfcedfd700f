"""Helpers shared by the test suite: real brains, real servers, stand-ins (named as such)."""
