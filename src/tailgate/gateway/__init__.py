"""The gateway face: an OpenAI-compatible proxy over several providers (docs/gateway.md)."""
