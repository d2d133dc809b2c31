"""The operator's endpoints: provider drain / enable, runtime keys over HTTP, config reload, and what the gateway
says about itself (models, health, /metrics)."""
