"""Project rules for the rendered overlays, beyond the Kubernetes and CRD schemas and checkov.

Usage: checks.py RENDERED.yaml... ; prints one line per overlay, the problems found, and exits 1
if there are any. Run by k8s/validate with the tools virtualenv (PyYAML comes with checkov).
It also prints, as JSON on the last line after "ARGV ", every `python -m service ...` argument
list found, which k8s/validate then parses with the service's own CLI parser.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

# libyaml's safe loader when PyYAML was built with it: the same documents, parsed in C.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

ROOT = Path(__file__).resolve().parents[1]
SECRET_NAME = "paid-mcp-service-secrets"  # noqa: S105 - a Secret object's name
SECRET_ENV = {
    "DATABASE_URL",
    "SECRET_KEY",
    "STRIPE_SECRET_KEY",
    "STRIPE_WEBHOOK_SECRET",
    "REQUEST_STATE_KEYS",
}
HOOK_ANNOTATIONS = {
    "argocd.argoproj.io/hook": "Sync",
    "argocd.argoproj.io/hook-delete-policy": "BeforeHookCreation",
    "helm.sh/hook": "pre-install,pre-upgrade",
    "helm.sh/hook-delete-policy": "before-hook-creation",
}
# The /mcp route must outlive a paid tool's waiting retry (PAYMENT_WAIT_SECONDS, 600 by default).
MIN_MCP_TIMEOUT_SECONDS = 600
# The kubelet probes the pods directly; through the Gateway these would be anyone's to flood.
PROBE_PATHS = ("/healthz", "/readyz")
ALERTS = {
    "PaidMcpWebhookFailures",
    "PaidMcpWebhookSilence",
    "PaidMcpWebhookEventsLate",
    "PaidMcpReconciliationRepairs",
    "PaidMcpHighServerErrorRate",
    "PaidMcpDatabasePoolExhausted",
    "PaidMcpCompletionBusDown",
    "PaidMcpUsageDecisionsQueued",
}
IMAGE = re.compile(r"[a-z0-9.-]+(:\d+)?/[a-z0-9./_-]+(:[\w.-]+|@sha256:[0-9a-f]{64})")
SERVICE_COMMAND = ["python", "-m", "service"]
WORKLOADS = {"Deployment", "Job"}


def graceful_shutdown_seconds() -> int:
    for source in sorted((ROOT / "service").glob("cli*.py")):
        match = re.search(r"timeout_graceful_shutdown=(\d+)", source.read_text())
        if match:
            return int(match.group(1))
    raise SystemExit("service/cli*.py: uvicorn's timeout_graceful_shutdown=<seconds> not found")


def duration_seconds(value: str) -> float:
    """A Gateway API duration (e.g. 1h, 30m, 3600s, 500ms) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+)(ms|h|m|s)", value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"not a duration: {value!r}")
    return sum(int(n) * units[u] for n, u in parts)


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def check_container(where: str, container: dict[str, Any], problems: list[str]) -> None:
    sc = container.get("securityContext", {})
    expected = {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
    }
    for key, value in expected.items():
        if sc.get(key) is not value:
            problems.append(f"{where}: securityContext.{key} must be {value}")
    if sc.get("capabilities", {}).get("drop") != ["ALL"]:
        problems.append(f"{where}: securityContext.capabilities.drop must be [ALL]")
    if sc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        problems.append(f"{where}: seccompProfile must be RuntimeDefault")
    resources = container.get("resources", {})
    for kind in ("requests", "limits"):
        for resource in ("cpu", "memory"):
            if resource not in resources.get(kind, {}):
                problems.append(f"{where}: resources.{kind}.{resource} missing")
    image = container.get("image", "")
    if not IMAGE.fullmatch(image) or image.endswith(":latest"):
        problems.append(f"{where}: image {image!r} is not <registry>/<name>:<tag> (set by kustomize images:)")
    mounts = [m.get("mountPath") for m in container.get("volumeMounts", [])]
    if "/tmp" not in mounts:  # noqa: S108
        problems.append(f"{where}: /tmp must be a writable volume (the root filesystem is read-only)")
    for env in container.get("env", []):
        name = env["name"]
        if (
            name in SECRET_ENV
            or re.search(r"SECRET|PASSWORD|TOKEN|_KEYS?$", name)
            or env.get("valueFrom", {}).get("secretKeyRef")
        ):
            problems.append(f"{where}: {name}: secrets are files in SECRETS_DIR, never environment variables")


def check_secret_files(
    where: str, container: dict[str, Any], volumes: dict[str, Any], secrets_dir: str
) -> list[str]:
    """The Secret is mounted read-only at SECRETS_DIR, from a secret or projected volume."""
    mount = next((m for m in container.get("volumeMounts", []) if m.get("mountPath") == secrets_dir), None)
    if mount is None:
        return [f"{where}: SECRETS_DIR {secrets_dir} is not mounted"]
    problems = []
    if mount.get("readOnly") is not True:
        problems.append(f"{where}: the secrets mount must be readOnly")
    volume = volumes.get(mount["name"], {})
    sources = [volume["secret"]] if "secret" in volume else []
    sources += [src["secret"] for src in volume.get("projected", {}).get("sources", []) if "secret" in src]
    names = {src.get("secretName", src.get("name")) for src in sources}
    if names != {SECRET_NAME}:
        problems.append(
            f"{where}: the secrets mount must come from Secret {SECRET_NAME} only, not {sorted(names)}"
        )
    return problems


def check_overlay(rendered: Path, argv: list[list[str]]) -> list[str]:
    docs = [doc for doc in yaml.load_all(rendered.read_text(), Loader=SAFE_LOADER) if doc]
    problems: list[str] = []
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
        if doc["kind"] == "Secret":
            problems.append(
                f"{doc['metadata']['name']}: a Secret is rendered; no secret belongs in the repository"
            )

    namespaces = {doc["metadata"].get("namespace") for doc in docs if doc["kind"] != "Namespace"}
    if len(namespaces) != 1 or None in namespaces:
        problems.append(f"every object needs the overlay's one namespace, got {sorted(map(str, namespaces))}")

    configmaps = {cm["metadata"]["name"]: cm.get("data", {}) for cm in by_kind.get("ConfigMap", [])}
    services = {svc["metadata"]["name"]: svc for svc in by_kind.get("Service", [])}
    policies = by_kind.get("NetworkPolicy", [])
    pods: list[tuple[str, dict[str, Any]]] = []
    ports_by_pod: dict[str, set[str]] = {}
    grace = graceful_shutdown_seconds()

    for workload in (d for d in docs if d["kind"] in WORKLOADS):
        name = f"{workload['kind']}/{workload['metadata']['name']}"
        template = workload["spec"]["template"]
        spec = template["spec"]
        pods.append((name, template["metadata"].get("labels", {})))
        ports_by_pod[name] = {p.get("name") for c in spec.get("containers", []) for p in c.get("ports", [])}
        if spec.get("automountServiceAccountToken") is not False:
            problems.append(f"{name}: automountServiceAccountToken must be false")
        # Service links would inject e.g. STRIPE_SANDBOX_PORT=tcp://... for the stripe-sandbox
        # Service, which the settings would read as the sandbox port and refuse.
        if spec.get("enableServiceLinks") is not False:
            problems.append(f"{name}: enableServiceLinks must be false (its variables clash with settings)")
        if spec.get("securityContext", {}).get("runAsNonRoot") is not True:
            problems.append(f"{name}: pod securityContext.runAsNonRoot must be true")
        volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
        if workload["kind"] == "Job":
            annotations = workload["metadata"].get("annotations", {})
            for key, value in HOOK_ANNOTATIONS.items():
                if annotations.get(key) != value:
                    problems.append(
                        f"{name}: annotation {key} must be {value!r} (migration before the rollout)"
                    )
        for container in spec.get("containers", []):
            where = f"{name}/{container['name']}"
            check_container(where, container, problems)
            for source in container.get("envFrom", []):
                ref = source.get("configMapRef", {}).get("name")
                if ref and ref not in configmaps:
                    problems.append(f"{where}: envFrom ConfigMap {ref} is not rendered")
                elif ref and configmaps[ref].get("SECRETS_DIR"):
                    problems += check_secret_files(where, container, volumes, configmaps[ref]["SECRETS_DIR"])
            if container.get("command") == SERVICE_COMMAND:
                argv.append(container.get("args", []))
            elif container.get("command"):
                problems.append(f"{where}: command must be {SERVICE_COMMAND}")
            if workload["kind"] == "Deployment" and container.get("args") == ["serve"]:
                for probe, url in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                    if container.get(probe, {}).get("httpGet", {}).get("path") != url:
                        problems.append(f"{where}: {probe} must GET {url}")
                pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {})
                pre_stop = pre_stop.get("command", [])
                sleep = int(pre_stop[1]) if pre_stop[:1] == ["sleep"] else 0
                if sleep < 3:
                    problems.append(f"{where}: preStop must sleep a few seconds so endpoints drain")
                total = spec.get("terminationGracePeriodSeconds", 30)
                if total < sleep + grace:
                    problems.append(
                        f"{name}: terminationGracePeriodSeconds {total} < preStop {sleep} s + graceful "
                        f"shutdown {grace} s (service/cli.py)"
                    )

    for name, labels in pods:
        if not any(labels_match(p["spec"]["podSelector"].get("matchLabels", {}), labels) for p in policies):
            problems.append(f"{name}: no NetworkPolicy selects its pods")

    for svc in services.values():
        selector = svc["spec"].get("selector", {})
        if not any(labels_match(selector, labels) for _, labels in pods):
            problems.append(f"Service/{svc['metadata']['name']}: selector matches no pod template")

    problems += check_gateway(by_kind, services)
    problems += check_monitoring(by_kind, pods, ports_by_pod)

    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        ref = hpa["spec"]["scaleTargetRef"]
        if not any(d["kind"] == ref["kind"] and d["metadata"]["name"] == ref["name"] for d in docs):
            problems.append(f"HPA/{hpa['metadata']['name']}: target {ref['kind']}/{ref['name']} not rendered")
        if hpa["spec"].get("minReplicas", 1) < 2:
            problems.append(f"HPA/{hpa['metadata']['name']}: minReplicas must be >= 2 (PDB minAvailable 1)")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        selector = pdb["spec"]["selector"].get("matchLabels", {})
        if not any(labels_match(selector, labels) for _, labels in pods):
            problems.append(f"PDB/{pdb['metadata']['name']}: selector matches no pod template")

    prefix = "paid-mcp-service-config"
    config = next((data for name, data in configmaps.items() if name.startswith(prefix)), None)
    if config is None:
        problems.append("ConfigMap paid-mcp-service-config is not rendered")
    else:
        if config.get("HOST") != "0.0.0.0":  # noqa: S104
            problems.append("HOST must be 0.0.0.0 in a container")
        if config.get("ENVIRONMENT") == "production" and not config.get("PUBLIC_BASE_URL", "").startswith(
            "https://"
        ):
            problems.append("production needs an https PUBLIC_BASE_URL")
        if (
            config.get("ENVIRONMENT", "development") == "development"
            and config.get("ALLOW_NON_LOOPBACK_IN_DEVELOPMENT", "").lower() != "true"
        ):
            problems.append(
                "development settings listen on 0.0.0.0 only with ALLOW_NON_LOOPBACK_IN_DEVELOPMENT=true"
            )
        if not config.get("TRUSTED_PROXIES"):
            # Behind the Gateway every peer is an Envoy pod: per-address limits need its X-Forwarded-For.
            problems.append("TRUSTED_PROXIES must name the Gateway proxies' addresses (the pod CIDR)")
        if config.get("ENVIRONMENT") == "production" and config.get("STRIPE_API_BASE"):
            problems.append("production must talk to the real Stripe API (no STRIPE_API_BASE)")
        api_base = config.get("STRIPE_API_BASE")
        if api_base:
            host = re.sub(r"^https?://([^:/]+).*$", r"\1", api_base)
            if host not in services:
                problems.append(f"STRIPE_API_BASE {api_base} names no rendered Service")
        leaked = sorted(SECRET_ENV & set(config))
        if leaked:
            problems.append(f"ConfigMap holds secret settings {leaked}")
        if not config.get("SECRETS_DIR"):
            problems.append("SECRETS_DIR must name the mounted Secret's directory")
    return problems


def check_gateway(by_kind: dict[str, list[dict[str, Any]]], services: dict[str, Any]) -> list[str]:
    """HTTPRoutes attach to a rendered Gateway listener and reach a Service port; /mcp is sticky."""
    problems: list[str] = []
    gateways = {gw["metadata"]["name"]: gw for gw in by_kind.get("Gateway", [])}
    certificates = {cert["spec"]["secretName"] for cert in by_kind.get("Certificate", [])}
    for gw in gateways.values():
        for listener in gw["spec"]["listeners"]:
            if listener["protocol"] != "HTTPS":
                continue
            for ref in listener.get("tls", {}).get("certificateRefs", []):
                if ref["name"] not in certificates:
                    problems.append(
                        f"Gateway/{gw['metadata']['name']}: {ref['name']} is no Certificate's secretName"
                    )
    mcp_routes = []
    for route in by_kind.get("HTTPRoute", []):
        where = f"HTTPRoute/{route['metadata']['name']}"
        for parent in route["spec"].get("parentRefs", []):
            gw = gateways.get(parent["name"])
            listeners = {listener["name"] for listener in gw["spec"]["listeners"]} if gw else set()
            if gw is None or parent.get("sectionName", next(iter(listeners), None)) not in listeners:
                problems.append(f"{where}: parent {parent} is no rendered Gateway listener")
        for rule in route["spec"].get("rules", []):
            for ref in rule.get("backendRefs", []):
                target = services.get(ref["name"])
                ports = {p["port"] for p in target["spec"]["ports"]} if target else set()
                if ref.get("port") not in ports:
                    problems.append(f"{where}: no backend Service port {ref['name']}:{ref.get('port')}")
            paths = [m.get("path", {}).get("value") for m in rule.get("matches", [])]
            if "/mcp" in paths:
                mcp_routes.append(route["metadata"]["name"])
                timeout = rule.get("timeouts", {}).get("request", "")
                if not timeout or MIN_MCP_TIMEOUT_SECONDS > duration_seconds(timeout) > 0:
                    problems.append(f"{where}: /mcp needs timeouts.request >= {MIN_MCP_TIMEOUT_SECONDS}s")
    problems += check_probe_paths(by_kind)
    if len(mcp_routes) != 1:
        return [*problems, f"expected exactly one HTTPRoute rule for /mcp, found {len(mcp_routes)}"]
    # Sticky legacy sessions: the hash key must be on `initialize` too, so Authorization, not
    # Mcp-Session-Id (which the replica answering `initialize` mints).
    sticky = False
    for policy in by_kind.get("BackendTrafficPolicy", []):
        targets = {(t.get("kind"), t.get("name")) for t in policy["spec"].get("targetRefs", [])}
        if ("HTTPRoute", mcp_routes[0]) not in targets:
            continue
        balancer = policy["spec"].get("loadBalancer", {})
        hashing = balancer.get("consistentHash", {})
        headers = [header.get("name", "").lower() for header in hashing.get("headers", [])]
        sticky = balancer.get("type") == "ConsistentHash" and hashing.get("type") == "Headers"
        if not sticky or headers != ["authorization"]:
            problems.append(
                f"BackendTrafficPolicy/{policy['metadata']['name']}: /mcp must hash on Authorization only"
            )
    if not sticky:
        problems.append(f"HTTPRoute/{mcp_routes[0]}: no BackendTrafficPolicy makes /mcp sticky")
    return problems


def _covers(match: dict[str, Any], path: str) -> bool:
    """Whether an HTTPRoute path match takes `path` (no match at all: the prefix `/`)."""
    kind = match.get("path", {}).get("type", "PathPrefix")
    value = match.get("path", {}).get("value", "/")
    if kind == "Exact":
        return bool(value == path)
    return kind == "PathPrefix" and (
        value.rstrip("/") in ("", path) or path.startswith(value.rstrip("/") + "/")
    )


def check_probe_paths(by_kind: dict[str, list[dict[str, Any]]]) -> list[str]:
    """No route forwards the probe paths to a pod: an Exact rule answers them at the Gateway with a
    rendered HTTPRouteFilter's directResponse."""
    problems: list[str] = []
    responders = {
        f["metadata"]["name"] for f in by_kind.get("HTTPRouteFilter", []) if f["spec"].get("directResponse")
    }
    answered: set[str] = set()
    forwarded: dict[str, str] = {}
    for route in by_kind.get("HTTPRoute", []):
        where = f"HTTPRoute/{route['metadata']['name']}"
        for rule in route["spec"].get("rules", []):
            matches = rule.get("matches") or [{}]
            refs = [f["extensionRef"] for f in rule.get("filters", []) if f.get("type") == "ExtensionRef"]
            for ref in refs:
                if ref.get("kind") == "HTTPRouteFilter" and ref.get("name") not in responders:
                    problems.append(
                        f"{where}: HTTPRouteFilter {ref.get('name')} is not rendered with a directResponse"
                    )
            for path in PROBE_PATHS:
                if not any(_covers(match, path) for match in matches):
                    continue
                exact = any(m.get("path", {}).get("type") == "Exact" for m in matches if _covers(m, path))
                if rule.get("backendRefs"):
                    forwarded.setdefault(path, where)
                    if exact:
                        problems.append(f"{where}: {path} must not be forwarded to the service")
                elif exact and any(ref.get("name") in responders for ref in refs):
                    answered.add(path)
    for path, where in forwarded.items():
        if path not in answered:
            problems.append(
                f"{where}: {path} reaches the service through the Gateway; the kubelet probes pods "
                "directly, so answer it at the Gateway (an Exact rule with a directResponse filter)"
            )
    return problems


def check_monitoring(
    by_kind: dict[str, list[dict[str, Any]]],
    pods: list[tuple[str, dict[str, str]]],
    ports_by_pod: dict[str, set[str]],
) -> list[str]:
    """A PodMonitor scrapes the service pods' metrics port; the PrometheusRule has the alerts."""
    problems: list[str] = []
    monitors = by_kind.get("PodMonitor", [])
    if not monitors:
        problems.append("no PodMonitor is rendered")
    for monitor in monitors:
        selector = monitor["spec"]["selector"].get("matchLabels", {})
        selected = [name for name, labels in pods if labels_match(selector, labels)]
        if not selected:
            problems.append(f"PodMonitor/{monitor['metadata']['name']}: selector matches no pod template")
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            for name in selected:
                if endpoint.get("port") not in ports_by_pod[name]:
                    problems.append(f"PodMonitor: {name} has no port named {endpoint.get('port')}")
    alerts = {
        rule["alert"]
        for prometheus_rule in by_kind.get("PrometheusRule", [])
        for group in prometheus_rule["spec"]["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    missing = sorted(ALERTS - alerts)
    if missing:
        problems.append(f"PrometheusRule lacks the alerts {missing}")
    return problems


def main(paths: list[str]) -> int:
    argv: list[list[str]] = []
    failed = False
    for name in paths:
        problems = check_overlay(Path(name), argv)
        print(f"{Path(name).stem}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            print(f"  - {problem}")
        failed |= bool(problems)
    print("ARGV " + json.dumps(argv))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
