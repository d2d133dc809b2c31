"""The load tester (``tailgate bench``): workloads, the load generator, results, thresholds, reports.

``results`` aggregates one run (one target at one load level or stage) exactly and mergeably and
writes the versioned ``results.json`` / CSV; ``thresholds`` parses and evaluates k6-style pass/fail
expressions against those runs. Metric definitions follow docs/metrics.md; the JSON
schema is documented in docs/bench-results.md.
"""
