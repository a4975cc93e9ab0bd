# Redis from Debian: the Celery broker. Append-only file synced on every write, so a restarted
# broker keeps every queued and unacknowledged measurement (bench/chaos restarts it mid-campaign).
FROM ccscope/base:bookworm
RUN apt-get update && apt-get install -y redis-server && rm -rf /var/lib/apt/lists/*
USER redis
CMD ["sh", "-c", "exec redis-server --bind ${REDIS_BIND:-127.0.0.1} --port ${REDIS_PORT:-6379} --dir /var/lib/redis --tcp-keepalive 30 --appendonly yes --appendfsync always --save ''"]
