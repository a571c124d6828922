"""Tapis referee: the rules engine (`referee.engine`) and the gRPC service."""
