"""The experiment's JSON Schema, generated from the dataclasses of :mod:`.config`.

For agents (the MCP ``submit`` tool advertises it, ``experiment_schema`` returns it): every
field of :class:`~orchestrator.experiment.config.ExperimentConfig` and of its sections, with
its JSON type, its default and its description, the string literal written right after the
field in the dataclass body (read from the source with :mod:`ast`, so the schema says what
the code says). Sections are nested objects; ``additionalProperties`` is false everywhere a
dataclass is, because :func:`~orchestrator.experiment.config.load_experiment` refuses
unknown keys.

The schema states the shape of an experiment only; the rules across fields (lanes divide
the batch, a known precision, ...) are :func:`orchestrator.experiment.validate`'s.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
import types
import typing
from typing import Any

from orchestrator.experiment.config import ExperimentConfig

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_SCALAR_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def experiment_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of an experiment as a JSON object (module docstring)."""
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": "Zephon experiment",
        **dataclass_json_schema(ExperimentConfig),
    }


def dataclass_json_schema(cls: type) -> dict[str, Any]:
    """An object schema of the dataclass ``cls``: a property per field, with its type, its
    default (none for a nested dataclass: its own fields carry theirs) and its docstring."""
    hints = typing.get_type_hints(cls)
    docstrings = field_docstrings(cls)
    properties: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        schema = type_json_schema(hints[field.name])
        if field.name in docstrings:  # over a section's own class docstring
            rest = {key: value for key, value in schema.items() if key != "description"}
            schema = {"description": docstrings[field.name], **rest}
        default = field_default(field)
        if default is not dataclasses.MISSING and not dataclasses.is_dataclass(default):
            schema["default"] = default
        properties[field.name] = schema
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if description := class_description(cls):
        schema = {"description": description, **schema}
    return schema


def type_json_schema(annotation: Any) -> dict[str, Any]:
    """The JSON Schema of a field's type: scalars, ``X | None``, ``list[X]``,
    ``dict[str, X]``, ``Any`` and dataclasses; TypeError for anything else, so that a field
    of a new kind cannot silently get a wrong schema."""
    if annotation is Any:
        return {}
    if annotation in _SCALAR_TYPES:
        return {"type": _SCALAR_TYPES[annotation]}
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return dataclass_json_schema(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union) and len(args) == 2 and type(None) in args:
        inner = type_json_schema(next(a for a in args if a is not type(None)))
        # ["integer", "null"] reads better than anyOf where the type is a single name
        if isinstance(inner.get("type"), str):
            return {**inner, "type": [inner["type"], "null"]}
        return {"anyOf": [inner, {"type": "null"}]}
    if origin is list and len(args) == 1:
        return {"type": "array", "items": type_json_schema(args[0])}
    if origin is dict and len(args) == 2 and args[0] is str:
        values = type_json_schema(args[1])
        return {"type": "object", **({"additionalProperties": values} if values else {})}
    raise TypeError(f"no JSON Schema for the field type {annotation!r}")


def field_docstrings(cls: type) -> dict[str, str]:
    """Field name -> the string literal right after the field in ``cls``'s body (the
    attribute docstring convention), its whitespace collapsed to single spaces."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef)).body
    docstrings = {}
    for statement, following in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docstrings[statement.target.id] = " ".join(following.value.value.split())
    return docstrings


def class_description(annotation: Any) -> str | None:
    """The docstring of a dataclass, whitespace collapsed; None for other types and for a
    dataclass without one (``dataclasses`` then makes up its signature as ``__doc__``)."""
    if not (dataclasses.is_dataclass(annotation) and isinstance(annotation, type)):
        return None
    doc = annotation.__dict__.get("__doc__")
    if not doc or doc.startswith(f"{annotation.__name__}("):
        return None
    return " ".join(doc.split())


def field_default(field: dataclasses.Field[Any]) -> Any:
    """The field's default value (from its factory if it has one), or MISSING."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING
