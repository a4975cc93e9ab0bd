"""The ccscope REST API (FastAPI). `create_app(store)` builds it; `server.serve()` runs it."""
