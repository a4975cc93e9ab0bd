"""Routers the API app includes beside its own routes: operations and open-data downloads."""
