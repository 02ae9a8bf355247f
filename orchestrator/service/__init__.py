"""The job service for agents: many submitters, one durable queue, a scheduler, MCP.

client.py submits and reads jobs (admission.py checks them first; job.py says what a job
is), queue.py keeps them in SQLite (queue_database.py), scheduler.py (``zephon serve``)
runs each attempt as its own process (attempt.py) on devices pool.py leases; config.py
is a service's configuration (its root and rules). The MCP tools over the client functions
are a face beside the CLI (:mod:`orchestrator.mcp`). The service root folder is the trust
boundary: whoever can write it can submit.

Design: docs/design/orchestrator_service.md
"""
