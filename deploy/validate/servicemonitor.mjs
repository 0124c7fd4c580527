// Validates ServiceMonitor documents against the Prometheus Operator's CRD
// schema, which kubernetes-validate does not bundle. The schema comes from
// the npm package @kubernetes-models/prometheus-operator, installed by
// scripts/setup.sh.
//
//   node servicemonitor.mjs NODE_MODULES_DIR < documents.json
//
// stdin: a JSON array of Kubernetes objects. Exits 1 naming the first
// invalid document and the schema's complaint.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
if (!modules) {
  console.error("usage: node servicemonitor.mjs NODE_MODULES_DIR < documents.json");
  process.exit(2);
}
const { ServiceMonitor } = await import(
  pathToFileURL(
    join(modules, "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor.js"),
  ).href
);

const documents = JSON.parse(readFileSync(0, "utf8"));
let checked = 0;
for (const doc of documents) {
  if (doc?.kind !== "ServiceMonitor") continue;
  try {
    new ServiceMonitor(doc).validate();
  } catch (error) {
    console.error(
      `ServiceMonitor ${doc.metadata?.name}: ${error.message} ${JSON.stringify(error.errors ?? [])}`,
    );
    process.exit(1);
  }
  checked += 1;
}
if (checked === 0) {
  console.error("no ServiceMonitor in the input");
  process.exit(1);
}
console.log(`${checked} ServiceMonitor(s) valid`);
