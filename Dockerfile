# syntax=docker/dockerfile:1
#
# The production image: `python -m service serve` (default) or `python -m service migrate`.
# Build:  docker build -t registry.example.com/paid-mcp-service:<tag> .
#
# Layout in the final image: /opt/venv holds the dependencies only; the application source lives
# in /app with `alembic/` beside `service/` (service/db/migrations.py finds the migrations as
# <parent of the service package>/alembic), imported through PYTHONPATH=/app. Installing the
# project itself into site-packages would make that path resolve to site-packages/alembic, which
# is the alembic *library*, so the project is deliberately not pip-installed.

# Both stages use the same base (CPython 3.11, the version CI tests), so the virtualenv's
# interpreter symlink /opt/venv/bin/python -> /usr/local/bin/python3.11 resolves in the final stage.
# Pin it by digest in the release pipeline (python:3.11-slim-bookworm@sha256:...).

# ---- builder: resolve and install the dependencies into a virtualenv ----------------------------
FROM python:3.11-slim-bookworm AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /build
COPY pyproject.toml ./
# The runtime dependencies straight from pyproject.toml; wheels only, so no compiler is needed
# (every dependency publishes manylinux wheels for CPython 3.11 on amd64 and arm64).
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > requirements.txt \
    && python -m venv /opt/venv \
    && /opt/venv/bin/pip install --only-binary=:all: --no-cache-dir -r requirements.txt \
    && /opt/venv/bin/pip uninstall --yes pip setuptools wheel

# ---- final: the same base, the virtualenv and the source; no pip, no compiler, no secrets -------
FROM python:3.11-slim-bookworm

# A container listens on every interface, so the image runs production settings (which refuse the
# development secrets and the sandbox key at start-up); development settings refuse a non-loopback
# HOST unless ALLOW_NON_LOOPBACK_IN_DEVELOPMENT=true is set as well (the k8s sandbox overlay does).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    ENVIRONMENT=production \
    HOST=0.0.0.0 \
    PORT=8000

# The base image's own pip/setuptools/wheel are not needed at run time.
RUN python -m pip uninstall --yes --no-cache-dir pip setuptools wheel \
    && groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin app

COPY --from=builder /opt/venv /opt/venv

WORKDIR /app
# Owned by root and not writable by the app user; bytecode is compiled here because the root
# filesystem is read-only at run time (only /tmp is writable, an emptyDir in Kubernetes).
COPY alembic.ini ./
COPY alembic ./alembic
COPY service ./service
RUN python -m compileall -q /app/service /app/alembic

USER 10001:10001
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8000'), timeout=4)"]

ENTRYPOINT ["python", "-m", "service"]
CMD ["serve"]
