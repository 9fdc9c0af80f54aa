"""The EchoMQ dashboard: ``create_app(conn, *, floor=None, token=None, read_only=False)``.

Needs the ``web`` extra (``pip install 'echomq[web]'``: Starlette, Jinja2, uvicorn);
``import echomq`` never loads it.
"""

from echomq.web.app import create_app

__all__ = ["create_app"]
