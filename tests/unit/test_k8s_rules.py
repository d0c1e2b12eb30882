"""k8s/checks.py refuses rendered manifests that break the deployment's rules (k8s/validate runs it).

Each case renders the production overlay, breaks one thing and expects the rule to name it.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
Docs = list[dict[str, Any]]
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl renders the overlays")


def load_checks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_checks", ROOT / "k8s" / "checks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rendered() -> str:
    overlay = ROOT / "k8s" / "overlays" / "production"
    return subprocess.run(
        ["kubectl", "kustomize", str(overlay)], check=True, capture_output=True, text=True
    ).stdout


def problems_after(rendered: str, tmp_path: Path, change: Callable[[Docs], None]) -> list[str]:
    docs = [doc for doc in yaml.load_all(rendered, Loader=SAFE_LOADER) if doc]
    change(docs)
    path = tmp_path / "production.yaml"
    path.write_text(yaml.dump_all(docs, Dumper=SAFE_DUMPER))
    problems: list[str] = load_checks().check_overlay(path, [])
    return problems


def one(docs: Docs, kind: str, name: str | None = None) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"]))


def server(docs: Docs) -> dict[str, Any]:
    container: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return container


def hash_on_session_id(docs: Docs) -> None:
    one(docs, "BackendTrafficPolicy")["spec"]["loadBalancer"]["consistentHash"]["headers"] = [
        {"name": "Mcp-Session-Id"}
    ]


def drop_sticky_policy(docs: Docs) -> None:
    docs.remove(one(docs, "BackendTrafficPolicy"))


def short_mcp_timeout(docs: Docs) -> None:
    one(docs, "HTTPRoute", "paid-mcp-service-mcp")["spec"]["rules"][0]["timeouts"]["request"] = "60s"


def public_probes(docs: Docs) -> None:
    rules = one(docs, "HTTPRoute", "paid-mcp-service")["spec"]["rules"]
    rules[:] = [rule for rule in rules if rule.get("backendRefs")]


def forwarded_readyz(docs: Docs) -> None:
    rules = one(docs, "HTTPRoute", "paid-mcp-service")["spec"]["rules"]
    rules.append({**rules[0], "matches": [{"path": {"type": "Exact", "value": "/readyz"}}]})


def no_probe_responder(docs: Docs) -> None:
    docs.remove(one(docs, "HTTPRouteFilter"))


def secret_as_env(docs: Docs) -> None:
    ref = {"secretKeyRef": {"name": "paid-mcp-service-secrets", "key": "SECRET_KEY"}}
    server(docs)["env"] = [{"name": "SECRET_KEY", "valueFrom": ref}]


def writable_secrets(docs: Docs) -> None:
    for mount in server(docs)["volumeMounts"]:
        mount.pop("readOnly", None)


def no_hook(docs: Docs) -> None:
    del one(docs, "Job")["metadata"]["annotations"]["argocd.argoproj.io/hook"]


def no_silence_alert(docs: Docs) -> None:
    for group in one(docs, "PrometheusRule")["spec"]["groups"]:
        group["rules"] = [rule for rule in group["rules"] if rule.get("alert") != "PaidMcpWebhookSilence"]


def wrong_metrics_port(docs: Docs) -> None:
    one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["port"] = "http-metrics"


def wrong_tls_secret(docs: Docs) -> None:
    one(docs, "Gateway")["spec"]["listeners"][0]["tls"]["certificateRefs"][0]["name"] = "other-tls"


def no_trusted_proxies(docs: Docs) -> None:
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "TRUSTED_PROXIES" in d.get("data", {}))
    del config["data"]["TRUSTED_PROXIES"]


def test_the_rendered_overlay_keeps_the_rules(rendered: str, tmp_path: Path) -> None:
    assert problems_after(rendered, tmp_path, lambda docs: None) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (hash_on_session_id, "/mcp must hash on Authorization only"),
        (drop_sticky_policy, "no BackendTrafficPolicy makes /mcp sticky"),
        (short_mcp_timeout, "/mcp needs timeouts.request >= 600s"),
        (public_probes, "/readyz reaches the service through the Gateway"),
        (public_probes, "/healthz reaches the service through the Gateway"),
        (forwarded_readyz, "/readyz must not be forwarded to the service"),
        (no_probe_responder, "HTTPRouteFilter paid-mcp-service-not-public is not rendered"),
        (secret_as_env, "secrets are files in SECRETS_DIR"),
        (writable_secrets, "the secrets mount must be readOnly"),
        (no_hook, "annotation argocd.argoproj.io/hook"),
        (no_silence_alert, "PaidMcpWebhookSilence"),
        (wrong_metrics_port, "has no port named http-metrics"),
        (wrong_tls_secret, "other-tls is no Certificate's secretName"),
        (no_trusted_proxies, "TRUSTED_PROXIES must name the Gateway proxies' addresses"),
    ],
)
def test_a_broken_rule_is_named(
    rendered: str, tmp_path: Path, change: Callable[[Docs], None], problem: str
) -> None:
    problems = problems_after(rendered, tmp_path, change)

    assert any(problem in found for found in problems), problems
