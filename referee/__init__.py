"""Tapis referee: the rules engine (`tapis_cartes.referee.engine`) and the gRPC service."""

from tapis_cartes import __version__

__all__ = ["__version__"]
