# One image for the web server, the Celery worker and Celery beat.
FROM python:3.13-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# Runtime requirements only: the test and lint tools live in requirements/dev.txt.
COPY requirements/runtime.txt requirements/runtime.txt
RUN pip install --no-cache-dir -r requirements/runtime.txt
COPY . .
# Static files are built with the storage production serves them from (whitenoise's hashed names
# and manifest). Production settings refuse to load without their variables, so this one command
# gets placeholders; collectstatic connects to neither the database nor Redis. At run time the
# real variables are required, and missing ones stop the container at start.
RUN DJANGO_SETTINGS_MODULE=config.settings.production \
    DJANGO_SECRET_KEY=collectstatic-only \
    DJANGO_ALLOWED_HOSTS=localhost \
    DATABASE_URL=postgres://build@localhost/build \
    REDIS_URL=redis://localhost:6379/0 \
    python manage.py collectstatic --noinput
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin arena \
    && mkdir -p /app/var/media && chown arena /app/var/media
USER arena
ENV DJANGO_SETTINGS_MODULE=config.settings.production ARENA_HOST=0.0.0.0 ARENA_PORT=8000
EXPOSE 8000
CMD ["bin/serve"]
