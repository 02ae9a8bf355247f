"""``zephon mcp``: Zephon's tools for LLM agents over the Model Context Protocol (stdio).

A face like the CLI (:mod:`orchestrator.cli`): tools.py holds the tools, the job service's
functions (:mod:`orchestrator.service.client`), the guard and the mix search, each a
method whose signature and docstring are what agents see; server.py builds the FastMCP
server that offers them, with the instructions agents are told. Every tool that trains
queues a job: nothing trains in this process.

Design: docs/design/orchestrator_service.md
"""
