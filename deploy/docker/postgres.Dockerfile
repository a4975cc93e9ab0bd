# PostgreSQL 15 from Debian. The data directory is a volume; the first start runs initdb.
FROM ccscope/base:bookworm
RUN apt-get update && apt-get install -y postgresql-15 && rm -rf /var/lib/apt/lists/*
# The volume's mount point, owned by postgres: a new named volume takes this ownership (else it
# is root's and initdb, running as postgres, cannot set its mode).
RUN install -d -o postgres -g postgres -m 700 /var/lib/postgresql/data
COPY deploy/docker/postgres-start.sh /usr/local/bin/postgres-start
USER postgres
CMD ["/usr/local/bin/postgres-start"]
