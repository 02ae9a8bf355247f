"""The only code that talks to MLflow: names, URIs, the Tracker that writes every run, and
the team's tracking server.

::

    mlflow_names.py   run, tag, param, metric and artifact names (what users query)
    run_kind.py       the kinds of run Zephon creates (RunKind, the zephon.kind tag)
    uris.py           tracking URIs and the pre-launch check
    store.py          the MLflow store of a URI: client, batched writes, errors (imports MLflow)
    mlflow_status.py  MLflow's run statuses (MlflowStatus), and what a finished run ends as
    provenance.py     package versions, git revision, a training run's start tags
    metric_units.py   a run folder's new steps and evals as metric units, and their batches
    inputs.py         a run's datasets (training, evaluation) as MLflow dataset inputs
    mirrored_run.py   what the tracker mirrors: a run's records as their owner holds them
    tracker.py        Tracker: a run -> its MLflow run (incremental, batched, resumable),
                      and the other runs Zephon creates (sweep parents, comparisons, planned jobs)
    store_reader.py   reading runs back for the guard
    team_server.py    the team's `mlflow server` on PostgreSQL (scripts/tracking_server.sh)
    postgres_cluster.py  a private PostgreSQL cluster in a folder, for a team without one
"""
