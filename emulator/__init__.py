"""A local emulator of Together AI's RL / post-training HTTP API (see README.md)."""

__version__ = "0.2.0"
