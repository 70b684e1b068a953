"""What the Python tests share, in one package: tests/support/sagatest.

    core       paths, Checks, processes that die with the test, an HTTP
               client, a private PostgreSQL cluster (PgCluster) and that
               cluster with the three real services (System)
    hosts      the hosts suite's client, waiting and checks (scripts/hosts)
    clusters   what runs on those hosts: RabbitMQ and Patroni clusters, a
               plain PostgreSQL, the services (HostsSystem)
    cdp        a headless Chromium over the DevTools protocol (browser suite)
    oaschema   the OpenAPI subset docs/openapi.yaml uses, and its validator
    dockerfile the Dockerfile and .dockerignore read as Docker reads them

One way in: `meson test` sets PYTHONPATH to tests/support (tests/meson.build,
test_vars), and a test says `from sagatest.core import System`. By hand:
`PYTHONPATH=tests/support SAGA_BUILD_DIR=build python3 tests/ops/test_version.py`.
"""
