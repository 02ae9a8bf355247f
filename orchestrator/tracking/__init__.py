"""The only code that talks to MLflow: names, URIs, and the Tracker that writes every run.

::

    names.py     tag, param, metric and artifact names (what users query)
    tracker.py   URIs and the pre-launch check; Tracker: a run folder -> its MLflow run
                 (incremental, batched, resumable), and the other runs Zephon creates
                 (sweep parents, comparisons, planned jobs)
"""
