"""Evidence about providers from outside the request path: active probes and the monitor's priors at start-up."""
