"""Zephon's Hydra plugins, registered where Hydra looks for them (``hydra_plugins.*``).

``hydra/sweeper=zephon_mix`` (:mod:`sweeps.sweeper`, searching with :mod:`sweeps.search`)
and ``hydra/launcher=zephon``
(:mod:`sweeps.launcher`). The logic lives in ``sweeps/``; Hydra only instantiates
classes defined under this namespace, hence the thin subclasses.
"""

from hydra.core.config_store import ConfigStore

from sweeps import launcher, search, sweeper


class MixSweeper(search.SearchingMixSweeper):
    """See :class:`sweeps.sweeper.MixSweeper` and :class:`sweeps.search.SearchingMixSweeper`."""


class ZephonLauncher(launcher.ZephonLauncher):
    """See :class:`sweeps.launcher.ZephonLauncher`."""


ConfigStore.instance().store(
    group="hydra/sweeper", name="zephon_mix", node=sweeper.MixSweeperConf, provider="zephon"
)
ConfigStore.instance().store(
    group="hydra/launcher", name="zephon", node=launcher.ZephonLauncherConf, provider="zephon"
)
