"""memoryd: long-term markdown memory for coding agents, served by one daemon per user."""

__version__ = "0.1.0"
