"""The referee service: gRPC servicer (service.py), tables (tables.py), durable store
(store.py) and process wiring (app.py: `create_server`)."""

__all__: list[str] = []
