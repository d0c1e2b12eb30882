// Validates the custom resources in rendered manifests against their CRDs' OpenAPI schemas (types,
// enums, required fields, patterns, bounds), which kubernetes-validate does not know. The schemas
// come compiled in the @kubernetes-models packages pinned in package.json and package-lock.json.
// Usage: node validate-crds.mjs RENDERED.yaml...   (exit 1 on any invalid object)
//        node validate-crds.mjs --kinds             (the apiVersion and kind of each known CRD)
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { Certificate } from "@kubernetes-models/cert-manager/cert-manager.io/v1/Certificate";
import { BackendTrafficPolicy } from "@kubernetes-models/envoy-gateway/gateway.envoyproxy.io/v1alpha1/BackendTrafficPolicy";
import { ClientTrafficPolicy } from "@kubernetes-models/envoy-gateway/gateway.envoyproxy.io/v1alpha1/ClientTrafficPolicy";
import { Gateway } from "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/Gateway";
import { HTTPRoute } from "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute";
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const MODELS = [
  Certificate,
  BackendTrafficPolicy,
  ClientTrafficPolicy,
  Gateway,
  HTTPRoute,
  PodMonitor,
  PrometheusRule,
  ServiceMonitor,
];
const byType = new Map(MODELS.map((model) => [`${model.apiVersion} ${model.kind}`, model]));

if (process.argv[2] === "--kinds") {
  for (const type of byType.keys()) console.log(type);
  process.exit(0);
}

let invalid = 0;
for (const file of process.argv.slice(2)) {
  for (const document of parseAllDocuments(readFileSync(file, "utf8"))) {
    const object = document.toJS();
    const model = object && byType.get(`${object.apiVersion} ${object.kind}`);
    if (!model) continue;
    const name = `${file}: ${object.kind}/${object.metadata?.name}`;
    try {
      new model(object).validate();
      console.log(`${name}: valid (${object.apiVersion})`);
    } catch (error) {
      invalid += 1;
      console.log(`${name}: INVALID: ${error.message}`);
    }
  }
}
process.exit(invalid ? 1 : 0);
