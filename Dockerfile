# One image for the web server, the Celery worker and Celery beat.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements/lock.txt requirements/lock.txt
RUN pip install --no-cache-dir -r requirements/lock.txt
COPY . .
RUN DJANGO_SETTINGS_MODULE=config.settings.local python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["uvicorn", "config.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--ws", "websockets-sansio", "--ws-per-message-deflate", "False", "--lifespan", "off", "--workers", "2", "--proxy-headers"]
