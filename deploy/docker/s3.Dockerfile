# An S3-compatible store for the traces: moto's server (PyPI). A production deployment points
# CCSCOPE_S3_ENDPOINT at its object store instead (MinIO, Ceph RGW, a cloud bucket).
FROM ccscope/base:bookworm
RUN python3 -m venv /opt/moto && /opt/moto/bin/pip install --no-cache-dir "moto[server]>=5.0"
RUN useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin moto
USER moto
CMD ["sh", "-c", "exec /opt/moto/bin/python -m moto.server -H ${S3_BIND:-127.0.0.1} -p ${S3_PORT:-9000}"]
