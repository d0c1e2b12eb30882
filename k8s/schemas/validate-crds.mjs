// Validates the custom resources in rendered manifests against their CRDs' OpenAPI schemas, which
// kubernetes-validate does not know. The @kubernetes-models packages pinned in package.json and
// package-lock.json carry each CRD's schema twice, and both are checked:
//   - compiled to a validator: types, enums, required fields, patterns, bounds;
//   - as TypeScript interfaces: the TypeScript compiler refuses a field the CRD does not define,
//     as the API server's strict field validation would.
// Usage: node validate-crds.mjs RENDERED.yaml...   (exit 1 on any invalid object)
//        node validate-crds.mjs --kinds             (the apiVersion and kind of each known CRD)
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { parseAllDocuments } from "yaml";

const MODULES = [
  "@kubernetes-models/cert-manager/cert-manager.io/v1/Certificate",
  "@kubernetes-models/envoy-gateway/gateway.envoyproxy.io/v1alpha1/BackendTrafficPolicy",
  "@kubernetes-models/envoy-gateway/gateway.envoyproxy.io/v1alpha1/ClientTrafficPolicy",
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

const objects = [];
for (const file of process.argv.slice(2)) {
  for (const document of parseAllDocuments(readFileSync(file, "utf8"))) {
    const object = document.toJS();
    const known = object && byType.get(`${object.apiVersion} ${object.kind}`);
    if (known) objects.push({ ...known, object, name: `${file}: ${object.kind}/${object.metadata?.name}` });
  }
}

const problems = new Map(objects.map(({ name }) => [name, []]));
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
