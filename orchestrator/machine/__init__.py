"""This machine: its free devices and the dp size a run gets on them (devices.py), and the
precision a run trains in here (precision.py). Below ``run/`` and ``titan/``, which both ask.

Design: docs/design/orchestrator_run.md
"""
