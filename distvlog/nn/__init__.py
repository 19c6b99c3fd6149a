"""`distvlog.nn`: layers and losses for real training (Paddle's names)."""

from . import functional

__all__ = ["functional"]
