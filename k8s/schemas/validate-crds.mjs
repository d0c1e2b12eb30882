// Validates the custom resources in rendered manifests against their CRDs' OpenAPI schemas, which
// kubernetes-validate does not know. The @kubernetes-models packages pinned in package.json and
// package-lock.json carry each CRD's schema twice, and both are checked:
//   - compiled to a validator: types, enums, required fields, patterns, bounds;
//   - as TypeScript interfaces: the TypeScript compiler refuses a field the CRD does not define,
//     as the API server's strict field validation would.
// It also parses every PromQL expression, in the PrometheusRules and in the Grafana dashboards
// (ConfigMaps labelled grafana_dashboard), with Prometheus's own PromQL grammar.
// Usage: node validate-crds.mjs [--metrics-out FILE] RENDERED.yaml...   (exit 1 on any invalid object;
//          FILE receives the metric names the expressions select, one a line)
//        node validate-crds.mjs --kinds             (the apiVersion and kind of each known CRD)
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parser as promql } from "@prometheus-io/lezer-promql";
import ts from "typescript";
import { parseAllDocuments } from "yaml";

const MODULES = [
  "@kubernetes-models/cert-manager/cert-manager.io/v1/Certificate",
  "@kubernetes-models/envoy-gateway/gateway.envoyproxy.io/v1alpha1/BackendTrafficPolicy",
  "@kubernetes-models/envoy-gateway/gateway.envoyproxy.io/v1alpha1/ClientTrafficPolicy",
  "@kubernetes-models/envoy-gateway/gateway.envoyproxy.io/v1alpha1/HTTPRouteFilter",
  "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/Gateway",
  "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute",
  "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor",
  "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule",
  "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor",
];

const byType = new Map();
for (const module of MODULES) {
  const kind = module.split("/").pop();
  const model = (await import(module))[kind];
  byType.set(`${model.apiVersion} ${model.kind}`, { model, module, kind });
}

if (process.argv[2] === "--kinds") {
  for (const type of byType.keys()) console.log(type);
  process.exit(0);
}

let files = process.argv.slice(2);
let metricsOut = null;
if (files[0] === "--metrics-out") [, metricsOut, ...files] = files;

const objects = [];
for (const file of files) {
  for (const document of parseAllDocuments(readFileSync(file, "utf8"))) {
    const object = document.toJS();
    const known = object && byType.get(`${object.apiVersion} ${object.kind}`);
    if (known) objects.push({ ...known, object, name: `${file}: ${object.kind}/${object.metadata?.name}` });
  }
}

const problems = new Map(objects.map(({ name }) => [name, []]));

// Grafana's variables stand for a duration or a label value in these expressions.
const GRAFANA_VARIABLES = { $__rate_interval: "5m", $__interval: "1m", $__range: "1d" };
const metricNames = new Set();
function promqlProblem(expression) {
  const query = expression.replace(/\$\w+/g, (name) => GRAFANA_VARIABLES[name] ?? "x");
  let at = null;
  promql.parse(query).iterate({
    enter: (node) => {
      if (at === null && node.type.isError) at = node.from;
      if (node.name === "Identifier" && node.node.parent?.name === "VectorSelector") {
        metricNames.add(query.slice(node.from, node.to));
      }
      return at === null;
    },
  });
  return at === null ? null : `PromQL syntax error at character ${at}: ${expression.trim()}`;
}
for (const file of files) {
  for (const document of parseAllDocuments(readFileSync(file, "utf8"))) {
    const object = document.toJS();
    const name = `${file}: ${object?.kind}/${object?.metadata?.name}`;
    const expressions = [];
    if (object?.kind === "PrometheusRule") {
      for (const group of object.spec.groups) expressions.push(...group.rules.map((rule) => rule.expr));
    } else if (object?.kind === "ConfigMap" && object.metadata.labels?.grafana_dashboard) {
      for (const json of Object.values(object.data ?? {})) {
        for (const panel of JSON.parse(json).panels ?? []) {
          expressions.push(...(panel.targets ?? []).map((target) => target.expr));
        }
      }
    } else {
      continue;
    }
    if (!problems.has(name)) problems.set(name, []);
    for (const expression of expressions) {
      const problem = promqlProblem(String(expression));
      if (problem) problems.get(name).push(problem);
    }
  }
}
for (const { model, object, name } of objects) {
  try {
    new model(object).validate();
  } catch (error) {
    problems.get(name).push(error.message);
  }
}

// One typed constant per object; a diagnostic's line says which object it is about.
const here = dirname(fileURLToPath(import.meta.url));
const source = join(here, "rendered-objects.ts");
const lines = [];
const owners = [];
for (const { module, kind } of byType.values()) {
  lines.push(`import type { I${kind} as I${kind}_ } from "${module}";`);
  owners.push(null);
}
objects.forEach(({ kind, object, name }, index) => {
  const text = `export const object${index}: I${kind}_ = ${JSON.stringify(object, null, 2)};`.split("\n");
  lines.push(...text);
  owners.push(...text.map(() => name));
});
writeFileSync(source, lines.join("\n") + "\n");
const program = ts.createProgram([source], {
  noEmit: true,
  strict: true,
  skipLibCheck: true,
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
});
for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
  const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, " ");
  const line = diagnostic.file ? diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start).line : -1;
  const owner = owners[line];
  if (owner) problems.get(owner).push(message);
  else problems.set(`rendered-objects.ts:${line + 1}`, [message]);
}

if (metricsOut) writeFileSync(metricsOut, [...metricNames].sort().join("\n") + "\n");

let invalid = 0;
for (const [name, found] of problems) {
  if (found.length === 0) {
    console.log(`${name}: valid`);
  } else {
    invalid += 1;
    for (const message of found) console.log(`${name}: INVALID: ${message}`);
  }
}
process.exit(invalid ? 1 : 0);
