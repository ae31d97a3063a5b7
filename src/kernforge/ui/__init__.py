"""ui: `kernforge ui`, a local web dashboard over run folders (FastAPI, server-sent events, htmx).

It only reads run folders: a search never depends on it, and it can be started before,
during or after one (app.py). The pages are the report's views (report/views.py).
"""
