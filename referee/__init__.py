"""Tapis referee: the rules engine (`referee.engine`) and the gRPC service."""

__all__ = ["__version__"]

# The one version of Tapis: the package's (pyproject.toml reads it), `tapis --version`, and
# what a referee reports (its start-up log line, ListGamesResponse.version).
__version__ = "0.2.0"
