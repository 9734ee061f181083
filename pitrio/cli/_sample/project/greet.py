"""Greetings."""


def greet(name: str) -> str:
    """A friendly greeting for ``name``."""
    return "Hello " + name
