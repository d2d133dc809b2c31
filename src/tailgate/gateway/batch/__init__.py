"""The OpenAI Batch API on the gateway: its endpoints (``/v1/files``, ``/v1/batches``) and the executor that runs the
lines (docs/batch.md)."""
