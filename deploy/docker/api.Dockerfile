# The REST API with the dashboard mounted at /. Runs unprivileged: it reads the store and the
# trace store, and writes only through the API's token-guarded routes.
FROM ccscope/python
RUN useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin ccscope
USER ccscope
ENV CCSCOPE_DATA_DIR=/tmp/ccscope
CMD ["ccscope", "api", "--host", "0.0.0.0", "--port", "8080"]
