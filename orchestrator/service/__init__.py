"""The job service for agents: many submitters, one durable queue, a scheduler, MCP.

::

    client.py (submit / status / wait / cancel / logs / jobs)
        │  admission.py   data roots, limits: a request refused with every reason
        ▼
    queue.py        SQLite (WAL) job queue and its state machine
        ▼
    scheduler.py    ``zephon serve``: pool.py leases devices, jobs run as ``zephon run|resume``
    mcp_server.py   ``zephon mcp``: the client functions as MCP tools
"""
