"""``tailgate demo``: the whole system on one machine, with no keys and no network.

Simulated providers shaped like the ones our users measured (a ``provider-a`` primary and a same-cloud ``provider-a``
secondary; ``--all-providers`` adds ``provider-b`` … ``provider-e``), the gateway in front of them with
the 80/20 adaptive config, the store, the monitor, the dashboard, and open-loop background traffic;
after a warm-up, the failover drill (degrade, kill, restore the primary) and what happened in each
phase: cut-over time, errors, P99s, shares, re-admission.
"""

from tailgate.demo.run import DemoOptions, run_demo

__all__ = ["DemoOptions", "run_demo"]
