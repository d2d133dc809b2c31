"""The APIs the gateway serves, one module each (gateway/api.py: the handler protocol). Importing this package
registers the built-in ones; another API is one more module that calls ``api.register``."""

from tailgate.gateway.apis import chat, completions, embeddings, messages, responses

__all__ = ["chat", "completions", "embeddings", "messages", "responses"]
