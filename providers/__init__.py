"""The model provider chain: OpenAI-compatible and Anthropic adapters, failover, and the call trace.

Callers use `providers.chain.chat`; see docs/providers.md.
"""
