"""Running it for real: health checks, Prometheus metrics, the workers' heartbeats."""
