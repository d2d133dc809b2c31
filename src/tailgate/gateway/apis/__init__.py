"""The APIs the gateway serves, one module each (gateway/api_handler.py: the handler protocol). Importing this package
registers the built-in ones; another API is one more module that calls ``api_handler.register``."""

from tailgate.gateway.apis import chat, completions, embeddings, messages, responses

__all__ = ["chat", "completions", "embeddings", "messages", "responses"]
