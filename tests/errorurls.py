"""The site's URLs plus two that fail, for the error-handling tests (ROOT_URLCONF override)."""

from django.urls import path

from config.urls import handler400, handler403, handler404, handler500, urlpatterns

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]


def boom(request):
    raise RuntimeError("secret detail of the failure")


urlpatterns = [path("api/boom", boom), path("boom", boom), *urlpatterns]
