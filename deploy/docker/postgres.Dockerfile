# PostgreSQL 15 from Debian. The data directory is a volume; the first start runs initdb.
FROM ccscope/base:bookworm
RUN apt-get update && apt-get install -y postgresql-15 && rm -rf /var/lib/apt/lists/*
COPY deploy/docker/postgres-start.sh /usr/local/bin/postgres-start
USER postgres
CMD ["/usr/local/bin/postgres-start"]
