"""Zephon's Hydra config tree, installed as the package ``zephon_conf`` (pyproject.toml).

``zephon-run`` reads it as ``pkg://zephon_conf``, so a wheel install finds its configs;
Hydra reads a package only if it has this file.
"""
