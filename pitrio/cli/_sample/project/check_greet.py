"""Checks for greet.py: ``python3 check_greet.py`` prints "all checks passed"."""

from greet import greet


def check_greet() -> None:
    got = greet("world")
    assert got == "Hello, world!", f"greet('world') returned {got!r}"


if __name__ == "__main__":
    check_greet()
    print("all checks passed")
