"""Running the gateway as a process: bind, signals and drain (serve), worker processes' shared /metrics (workers), N
replicas in one process (replicas). Kept free of heavy imports: ``workers`` runs before prometheus_client is
imported."""
