# Celery beat with the store's scheduler: the enabled campaigns' crons, re-read every 2 minutes,
# plus the stale-measurement sweep. One per deployment.
FROM ccscope/python
RUN useradd --system --create-home --home-dir /var/lib/ccscope --shell /usr/sbin/nologin ccscope
USER ccscope
WORKDIR /var/lib/ccscope
CMD ["celery", "-A", "ccscope.workers.celery_app", "beat", "-S", "ccscope.workers.celery_app:CampaignScheduler", "--schedule", "/var/lib/ccscope/beat-schedule", "--loglevel", "INFO"]
