"""``zephon``, the command line: the parser (parser.py), one module per group of commands,
and dispatch.py, which runs one command and prints its one result."""

from orchestrator.cli.dispatch import main, parse_arguments, script
from orchestrator.cli.parser import build_parser

__all__ = ["build_parser", "main", "parse_arguments", "script"]
