"""The comparison guard's refusal rules: every reason not to compare a set of runs.

:func:`check` lists them (empty: the runs differ only in their data mixture);
:func:`apply_rules` also returns what scoring needs (the common eval step and its domains).
One module per group of rules: each run alone (run_records.py), the data the runs read
(data_read.py), how they were set up (configuration.py), how they group over seeds
(variants.py) and how they were scored (common_eval.py). The rules and why each exists:
``docs/design/guard.md``.
"""

from orchestrator.guard.rules.outcome import RulesOutcome, apply_rules, check
from orchestrator.guard.rules.variants import arm_key, runs_by_arm

__all__ = ["RulesOutcome", "apply_rules", "arm_key", "check", "runs_by_arm"]
