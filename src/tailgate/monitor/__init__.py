"""The monitor: scheduled standardized probes of every provider × model, stored for the leaderboard.

``Monitor`` runs rounds (``run_round``) over ``Target`` pairs taken from a gateway config
(``targets_from_config``) and writes each probe to a ``tailgate.ledger.samples.SampleStore``;
``monitor_main`` is the ``tailgate monitor`` command's loop. See docs/monitor.md.
"""

from tailgate.monitor.command import MonitorOptions, monitor_main
from tailgate.monitor.runner import Monitor, RoundReport, Target, targets_from_config

__all__ = ["Monitor", "MonitorOptions", "RoundReport", "Target", "monitor_main", "targets_from_config"]
