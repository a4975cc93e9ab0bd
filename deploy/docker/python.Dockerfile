# ccscope's Python package and its dependencies in /opt/ccscope: the API, beat and worker images
# start FROM this one. Build context: the repository root.
FROM ccscope/base:bookworm
RUN python3 -m venv /opt/ccscope
COPY pyproject.toml README.md /src/
COPY ccscope /src/ccscope
COPY capture /src/capture
COPY lab /src/lab
COPY classifier /src/classifier
COPY crawler /src/crawler
COPY workers /src/workers
COPY api /src/api
COPY dashboard /src/dashboard
RUN /opt/ccscope/bin/pip install --no-cache-dir /src && rm -rf /src
ENV PATH=/opt/ccscope/bin:$PATH PYTHONDONTWRITEBYTECODE=1
