"""The census dashboard: server-rendered pages over the store, mounted by the API process.

`dashboard_router(store)` (dashboard/router.py) is included by `ccscope.api.app.create_app`.
"""
