"""The suite's fixtures live in tests/kit/fixtures.py; nothing imports this file."""
pytest_plugins = ["tests.kit.fixtures"]
