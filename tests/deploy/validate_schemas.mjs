// Validates Kubernetes objects against the API schemas of the npm packages
// kubernetes-models (the Kubernetes API) and
// @kubernetes-models/prometheus-operator (ServiceMonitor), offline: types,
// required fields, enums and formats. Unknown fields are not reported (the
// API's OpenAPI schemas allow them).
//
//   node validate_schemas.mjs NODE_MODULES LABEL=OBJECTS.json...
//
// OBJECTS.json: a JSON array of objects (check_kubernetes.sh converts each
// rendered overlay). Prints one line per file; exits 1 if any object is
// invalid or has no schema.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const [nodeModules, ...inputs] = process.argv.slice(2);
const require = createRequire(join(nodeModules, "noop.js"));

function modelOf(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const candidates = group === ""
    ? [`kubernetes-models/${version}/${kind}`]
    : [`kubernetes-models/${group}/${version}/${kind}`,
       `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`];
  for (const name of candidates) {
    try {
      const module = require(name);
      if (module[kind]) return module[kind];
    } catch (error) {
      if (error.code !== "MODULE_NOT_FOUND" && error.code !== "ERR_PACKAGE_PATH_NOT_EXPORTED") throw error;
    }
  }
  return null;
}

let failed = false;
for (const input of inputs) {
  const [label, path] = input.split("=");
  const objects = JSON.parse(readFileSync(path, "utf8"));
  const errors = [];
  for (const object of objects) {
    const what = `${object.kind} ${object.metadata?.name}`;
    const Model = modelOf(object.apiVersion ?? "", object.kind ?? "");
    if (Model === null) {
      errors.push(`${what}: no schema for ${object.apiVersion} ${object.kind}`);
      continue;
    }
    try {
      new Model(object).validate();
    } catch (error) {
      errors.push(`${what}: ${error.message}`);
    }
  }
  if (errors.length > 0) {
    failed = true;
    console.log(`check_kubernetes: FAIL: ${label}: the API schema rejects:\n  - ${errors.join("\n  - ")}`);
  } else {
    console.log(`check_kubernetes: ${label}: ${objects.length} objects valid against the API schemas: OK`);
  }
}
process.exit(failed ? 1 : 0);
