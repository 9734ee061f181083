"""The schemas :func:`pitrio.tool` writes equal pydantic-ai's for the same functions.

Each function of the corpus below is given to ``pitrio.tool`` and to pydantic-ai's ``Tool``
(which builds its schema with pydantic's ``TypeAdapter`` and its ``GenerateToolJsonSchema``).
pydantic-ai's schema is normalised for the differences documented in ``docs/deviations.md``
("Tools from typed functions"): its ``$defs``/``$ref`` are written out in place (pitrio
inlines nested classes) and its ``title`` keys are dropped (pitrio writes none). Nothing else
is changed: types, ``anyOf`` order, ``enum``/``const``, ``required``, ``default`` and the
parameter descriptions read from the docstrings must be equal.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NewType, NotRequired, Optional, Required, Union

import attrs
import pydantic_ai
import pytest
from typing_extensions import TypedDict  # pydantic needs it before Python 3.12

from pitrio import tool


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


@dataclasses.dataclass
class Box:
    corner: Point
    tags: list[str] = dataclasses.field(default_factory=list)
    color: Color = Color.RED


@attrs.define
class AttrsPoint:
    x: float
    y: float = 0.0


class Movie(TypedDict):
    title: str
    year: int
    rating: NotRequired[float]


class Partial(TypedDict, total=False):
    name: Required[str]
    note: str


UserId = NewType("UserId", int)


async def f_scalars(a: str, b: int, c: float, d: bool) -> str:
    """Scalars.

    Args:
        a: a string.
        b: an integer.
        c: a number.
        d: a flag.
    """
    return ""


async def f_defaults(a: str = "x", b: int = 3, c: float = 1.5, d: bool = False) -> str:
    return ""


async def f_optional(a: int | None, b: Optional[str] = None) -> str:  # noqa: UP045  # the old spelling too
    return ""


async def f_union(a: int | str, b: Union[int, str, None] = None) -> str:  # noqa: UP007  # the old spelling too
    return ""


async def f_literal(mode: Literal["fast", "slow"], level: Literal[1, 2, 3] = 1) -> str:
    return ""


async def f_literal_single(kind: Literal["only"]) -> str:
    return ""


async def f_literal_mixed(v: Literal["a", 1]) -> str:
    return ""


async def f_literal_bool(flag: Literal[True]) -> str:
    return ""


async def f_enum(color: Color, level: Level = Level.LOW) -> str:
    return ""


async def f_optional_enum(color: Color | None = None) -> str:
    return ""


async def f_list(items: list[int], names: list[str] | None = None) -> str:
    return ""


async def f_sequence(items: Sequence[float], bare: list) -> str:  # type: ignore[type-arg]  # a bare list too
    return ""


async def f_tuple(pair: tuple[int, str], many: tuple[float, ...]) -> str:
    return ""


async def f_set(tags: set[str], frozen: frozenset[int]) -> str:
    return ""


async def f_dict(scores: dict[str, float], meta: dict[str, Any]) -> str:
    return ""


async def f_mapping(env: Mapping[str, str], bare: dict) -> str:  # type: ignore[type-arg]  # a bare dict too
    return ""


async def f_nested_containers(grid: list[list[int]], index: dict[str, list[str]]) -> str:
    return ""


async def f_any(value: Any, other: object) -> str:
    return ""


async def f_dataclass(point: Point, label: str) -> str:
    return ""


async def f_nested_dataclass(box: Box, scale: float = 1.0) -> str:
    return ""


async def f_optional_dataclass(point: Point | None = None, name: str = "") -> str:
    return ""


async def f_list_of_dataclass(points: list[Point], closed: bool) -> str:
    return ""


async def f_typeddict(movie: Movie, note: str) -> str:
    return ""


async def f_typeddict_total(p: Partial, n: int) -> str:
    return ""


async def f_newtype(user: UserId, name: str) -> str:
    return ""


async def f_default_list(tags: list[str] = ["a"], pair: tuple[int, int] = (1, 2)) -> str:  # noqa: B006  # a default the schema shows
    return ""


async def f_odd_shapes(empty: tuple[()], maybe: Literal["a", None], bare: tuple) -> str:  # type: ignore[type-arg]  # a bare tuple too
    return ""


async def f_numpy(a: int, b: str) -> str:
    """Numpy style.

    Parameters
    ----------
    a : int
        the first
        on two lines.
    b : str
        the second.
    """
    return ""


async def f_sphinx(a: int, b: str) -> str:
    """Sphinx style.

    :param a: the first.
    :param b: the second.
    """
    return ""


async def f_google_types(path: str, limit: int = 10) -> str:
    """Read a file.

    Reads the file at ``path``.

    Args:
        path (str): where the file is.
        limit (int): at most this many lines.
    """
    return ""


async def f_no_params() -> str:
    """Say hello."""
    return ""


def f_sync(a: int, b: int = 2) -> int:
    """A sync function."""
    return a + b


CORPUS = [
    f_scalars,
    f_defaults,
    f_optional,
    f_union,
    f_literal,
    f_literal_single,
    f_literal_mixed,
    f_literal_bool,
    f_enum,
    f_optional_enum,
    f_list,
    f_sequence,
    f_tuple,
    f_set,
    f_dict,
    f_mapping,
    f_nested_containers,
    f_any,
    f_dataclass,
    f_nested_dataclass,
    f_optional_dataclass,
    f_list_of_dataclass,
    f_typeddict,
    f_typeddict_total,
    f_newtype,
    f_default_list,
    f_odd_shapes,
    f_numpy,
    f_sphinx,
    f_google_types,
    f_no_params,
    f_sync,
]


def _inline(schema: Any, defs: Mapping[str, Any]) -> Any:
    if isinstance(schema, dict):
        if "$ref" in schema:
            target = _inline(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
            rest = {k: _inline(v, defs) for k, v in schema.items() if k != "$ref"}
            return {**target, **rest}
        return {k: _inline(v, defs) for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def _strip_titles(schema: Any, *, in_properties: bool = False) -> Any:
    if isinstance(schema, dict):
        return {
            k: _strip_titles(v, in_properties=(k == "properties" and not in_properties))
            for k, v in schema.items()
            if in_properties or k != "title"
        }
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def pydantic_schema(fn: Any) -> dict[str, Any]:
    """pydantic-ai's schema of ``fn``, with the documented differences normalised."""
    definition = pydantic_ai.Tool(fn).tool_def
    schema = definition.parameters_json_schema
    return _strip_titles(_inline(schema, schema.get("$defs", {})))  # type: ignore[no-any-return]


@pytest.mark.parametrize("fn", CORPUS, ids=lambda fn: fn.__name__)
def test_the_schema_is_pydantic_ais(fn: Any) -> None:
    """pitrio's schema of each corpus function equals pydantic-ai's (normalised)."""
    assert dict(tool(fn).parameters) == pydantic_schema(fn)


@pytest.mark.parametrize("fn", CORPUS, ids=lambda fn: fn.__name__)
def test_the_description_is_pydantic_ais(fn: Any) -> None:
    """The tool's description is the docstring's summary, as pydantic-ai reads it."""
    assert tool(fn).description == (pydantic_ai.Tool(fn).tool_def.description or "")


def test_the_corpus_is_large_enough() -> None:
    """At least 30 signatures are compared."""
    assert len(CORPUS) >= 30


async def f_attrs(point: AttrsPoint, label: str) -> str:
    return ""


def test_an_attrs_class_is_described_as_the_same_dataclass() -> None:
    """pydantic has no attrs support: an attrs class's schema equals its dataclass twin's."""
    assert dict(tool(f_attrs).parameters) == pydantic_schema(f_dataclass)


async def f_returns(a: int) -> str:
    """Sum.

    Args:
        a: first.

    Returns:
        the sum.
    """
    return ""


def test_deviation_returns_section_is_left_out_of_the_description() -> None:
    """pydantic-ai wraps the summary and the Returns text in XML tags; pitrio keeps the
    summary only (docs/deviations.md)."""
    theirs = pydantic_ai.Tool(f_returns).tool_def.description
    assert theirs == (
        "<summary>Sum.</summary>\n<returns>\n<description>the sum.</description>\n</returns>"
    )
    assert tool(f_returns).description == "Sum."
    assert dict(tool(f_returns).parameters) == pydantic_schema(f_returns)


async def f_single_object(point: Point) -> str:
    return ""


def test_deviation_a_single_object_parameter_stays_a_parameter() -> None:
    """pydantic-ai makes a lone dataclass parameter the whole schema; pitrio keeps the
    parameter (the model's arguments are always the function's keyword arguments)."""
    theirs = pydantic_schema(f_single_object)
    ours = dict(tool(f_single_object).parameters)
    assert ours["properties"]["point"] == theirs
    assert ours["required"] == ["point"]
