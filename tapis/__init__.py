"""Tapis: a referee service and record toolkit for trick-taking card games.

Installed as the one import namespace `tapis_cartes` (the distribution `tapis-cartes`; the
command `tapis`): this directory is the package itself, and setup.py maps the repository's
`referee/`, `records/` and `clients/` to `tapis_cartes.referee`, `tapis_cartes.records` and
`tapis_cartes.clients`, and `tapis/v1/` (generated from proto/) to `tapis_cartes.v1`.
The library a Python user imports is described in docs/python.md.
"""

__all__ = ["__version__"]

# The one version of Tapis: the distribution's (setup.py reads it), `tapis --version`, and
# what a referee reports (its start-up log line, ListGamesResponse.version).
__version__ = "0.2.0"
