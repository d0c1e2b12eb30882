# syntax=docker/dockerfile:1
#
# The production image: `paid-mcp-service serve` (default) or `paid-mcp-service migrate`.
# Build:  docker build -t registry.example.com/paid-mcp-service:<tag> .
#
# It holds what CI's smoke test installs (.ci/smoke-installed): the runtime dependencies pinned,
# with their hashes, in requirements.lock, and the wheel built from this source with
# `--no-deps`; the migrations ship inside the wheel. No source tree, pip or compiler in the image.

# Both stages use the same base (CPython 3.11, the version CI tests), so the virtualenv's
# interpreter symlink /opt/venv/bin/python -> /usr/local/bin/python3.11 resolves in the final stage.
# Pin it by digest in the release pipeline (python:3.11-slim-bookworm@sha256:...).

# ---- builder: the locked dependencies and the project's wheel, into a virtualenv ---------------
FROM python:3.11-slim-bookworm AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /build
# Wheels only, so no compiler is needed (every locked package publishes manylinux wheels for
# CPython 3.11 on amd64 and arm64, or is pure Python); each file is checked against the lock's hash.
COPY requirements.lock ./
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --only-binary=:all: --require-hashes --no-cache-dir -r requirements.lock

COPY pyproject.toml README.md LICENSE ./
COPY alembic ./alembic
COPY service ./service
# The wheel holds service/ only. The Stripe sandbox (stripe_sandbox/, the `sandbox` extra) is left
# out unless WITH_SANDBOX=true, for the k8s sandbox overlay's image only (`docker build --build-arg
# WITH_SANDBOX=true -t registry.example.com/paid-mcp-service:<tag>-sandbox .`); its dependencies
# are the service's own, already installed.
ARG WITH_SANDBOX=false
COPY sandbox ./sandbox
COPY stripe_sandbox ./stripe_sandbox
RUN python -m pip wheel --no-deps --no-cache-dir -w dist . \
    && if [ "$WITH_SANDBOX" = true ]; then python -m pip wheel --no-deps --no-cache-dir -w dist ./sandbox; fi \
    && /opt/venv/bin/pip install --no-deps --no-cache-dir dist/*.whl \
    && /opt/venv/bin/pip uninstall --yes pip setuptools wheel

# ---- final: the same base and the virtualenv; no pip, no compiler, no secrets -------------------
FROM python:3.11-slim-bookworm

# A container listens on every interface, so the image runs production settings (which refuse the
# development secrets and the sandbox key at start-up); development settings refuse a non-loopback
# HOST unless ALLOW_NON_LOOPBACK_IN_DEVELOPMENT=true is set as well (the k8s sandbox overlay does).
ENV PATH=/opt/venv/bin:$PATH \
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

# Owned by root and not writable by the app user; pip compiled the bytecode at install time,
# because the root filesystem is read-only at run time (only /tmp is writable).
COPY --from=builder /opt/venv /opt/venv

WORKDIR /app
USER 10001:10001
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8000'), timeout=4)"]

ENTRYPOINT ["paid-mcp-service"]
CMD ["serve"]
