"""What the gateway records about itself: the Prometheus objects (one owner), store and pool gauges read at scrape
time, per-minute traffic aggregates and the traffic trace."""
