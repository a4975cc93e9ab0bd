# Prometheus from Debian, scraping the API's /metrics (deploy/prometheus.yml).
FROM ccscope/base:bookworm
RUN apt-get update && apt-get install -y prometheus && rm -rf /var/lib/apt/lists/*
COPY deploy/prometheus.yml /etc/prometheus/prometheus.yml
# The volume's mount point, owned by prometheus (a new named volume takes this ownership).
RUN install -d -o prometheus -g prometheus /var/lib/prometheus/data \
 && chown prometheus:prometheus /var/lib/prometheus
USER prometheus
CMD ["sh", "-c", "sed \"s/@API@/${API_ADDR:-127.0.0.1:8080}/\" /etc/prometheus/prometheus.yml > /tmp/prometheus.yml && exec prometheus --config.file=/tmp/prometheus.yml --storage.tsdb.path=/var/lib/prometheus/data --web.listen-address=${PROM_LISTEN:-127.0.0.1:9090}"]
