"""The job service for agents: many submitters, one durable queue, a scheduler, MCP.

::

    client.py (submit / status / wait / cancel / logs / jobs)
        │  admission.py   data roots, limits: a request refused with every reason
        ▼
    queue.py        SQLite (WAL) job queue and its state machine
        ▼
    scheduler.py    ``zephon serve``: pool.py leases devices; each attempt of a job runs
                    as its own process on its lease (attempt.py)
    mcp_server.py   ``zephon mcp``: the client functions as MCP tools

Trust model. The service root is a folder; its files are the boundary.

* ``zephon serve`` runs as the OS user who owns the root; the job processes run as that
  user, with its files and devices. Run it under an account made for the service.
* Who may submit: every OS user who can write the root (SQLite needs write access to the
  queue even to read it). A submitter's identity is the OS user running the submitting
  process (the CLI, a Python program, or the ``zephon mcp`` server, fixed when it
  starts); no request names it, so a request cannot act as another submitter.
* A submitter can queue experiments, dry runs and elasticity checks that pass admission
  (data under the data roots, the service's runs root and tracking, the allowed model
  code, sizes under the limits), at most ``max_queued_per_submitter`` pending at once;
  read every job's state, logs and results, and compare runs; cancel its own jobs. It
  cannot run code or read files of its choosing through a spec, train outside the
  queue, or cancel another's jobs.
* What this does not stop: a user who can write the root can also edit ``queue.db`` or
  the run folders directly (the scheduler admits each spec again before it runs it, so
  such an edit still cannot escape admission, but it can forge a submitter or clear a
  limit). Give the root's write permission only to people trusted that far; an agent
  that must not be trusted gets the MCP tools, not a shell on the machine.
"""
