# syntax=docker/dockerfile:1
# The blockbudget service image: `blockbudget serve` on 0.0.0.0:8000 as an unprivileged user,
# configured entirely from the environment (see docs/operations.md and deploy/compose.yaml).
#
#   docker build -t blockbudget:0.1.0 .
#
# Stage 1 builds wheels for the package and its service, postgres and s3 extras; stage 2
# installs them without a compiler, a build backend or the source tree.

FROM python:3.11.10-slim-bookworm AS build
WORKDIR /build
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[service,postgres,s3]"

FROM python:3.11.10-slim-bookworm
LABEL org.opencontainers.image.title="blockbudget" \
      org.opencontainers.image.description="Differential-privacy budgets for growing datasets" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    BLOCKBUDGET_HOME=/var/lib/blockbudget \
    BLOCKBUDGET_HOST=0.0.0.0 \
    BLOCKBUDGET_PORT=8000
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels "blockbudget[service,postgres,s3]" \
    && groupadd --system --gid 10001 blockbudget \
    && useradd --system --uid 10001 --gid blockbudget --no-create-home \
       --home-dir /var/lib/blockbudget --shell /usr/sbin/nologin blockbudget \
    && mkdir -p /var/lib/blockbudget \
    && chown blockbudget:blockbudget /var/lib/blockbudget
WORKDIR /var/lib/blockbudget
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('BLOCKBUDGET_PORT', '8000'), timeout=4)"]
ENTRYPOINT ["blockbudget"]
CMD ["serve"]
