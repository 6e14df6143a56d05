"""ASGI entry point: Django over HTTP, the arena's consumers over websockets."""

import gc
import os
from importlib import import_module

import django

from config.handlers import SyncChainASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
# Django is set up before anything imports models (consumers, routing), as
# django.core.asgi.get_asgi_application does; its handler runs a request's middleware and view
# in one thread crossing (config/handlers.py).
django.setup(set_prefix=False)
django_asgi_app = SyncChainASGIHandler()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.sessions import SessionMiddlewareStack  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.cache import caches  # noqa: E402

from answer_style import count_tokens  # noqa: E402
from arena.origin import SameOriginValidator  # noqa: E402

# Each app's websocket routes, by module name, as config/urls.py includes each app's URLconf:
# the battle's and the red-teaming arena's. Named rather than imported, so that the arena (whose
# tests serve this application) does not come to import the apps that build on it.
WEBSOCKET_ROUTES = ("arena.routing", "redteam.routing")
websocket_urlpatterns = [
    pattern for name in WEBSOCKET_ROUTES for pattern in import_module(name).websocket_urlpatterns
]

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # Scheme, host and port of the Origin against the page's own (or a trusted origin):
        # channels' AllowedHostsOriginValidator compares hosts only (arena/origin.py).
        # Sessions only: the battle socket knows a visitor by the session and never reads
        # ``scope["user"]``. AuthMiddlewareStack would load the session and the user before the
        # consumer runs, in the one thread every socket of the process shares (and, with
        # CONN_MAX_AGE 0, on a new database connection each time); the consumer loads the
        # session in its own database threads instead.
        "websocket": SameOriginValidator(SessionMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# One cache object per alias, and so one Redis connection pool, for the whole process. Django
# keeps its cache objects in an asgiref Local (per context, and per thread); a websocket's or a
# request's task, or a database thread, that finds none in its context makes its own, with a
# pool of its own and a new Redis connection (a connect and a handshake) each time. Made here,
# in the context the server's tasks are created from, it is the one they and their database
# threads find.
for _alias in settings.CACHES:
    caches[_alias]

# The style counts' tokenizer (about 0.2 s to load, some 65 MB: answer_style.counts) is loaded
# with the server, not by the first turn's end, in a database thread that would hold the GIL
# against the relay of every battle's tokens for that long.
count_tokens("")

# Everything imported and built so far lives as long as the process: move it out of the
# garbage collector's generations, so that a full collection walks only the objects made since
# (battles, sockets, requests) rather than all of Django too. Without this, a full collection
# under load stalls the event loop relaying tokens for tens of milliseconds (bench/streaming.py).
gc.freeze()
