// Validates Kubernetes objects against the API schemas of the npm packages
// kubernetes-models (the Kubernetes API) and
// @kubernetes-models/prometheus-operator (ServiceMonitor), offline: types,
// required fields, enums and formats by the packages' validators; fields the
// API does not define (a misspelt or misplaced key, which those validators
// let through, as the API's OpenAPI schemas allow any) by walking each object
// along the TypeScript declarations (.d.ts) the same packages ship.
// Custom resources of the CRDs given with --crd (tests/deploy/crds: the
// Gateway API's GRPCRoute, Envoy Gateway's BackendTrafficPolicy) validate
// against their CRD's openAPIV3Schema instead (crd_schema.mjs), and their
// metadata against ObjectMeta.
//
//   node validate_schemas.mjs NODE_MODULES [--crd=CRDS.json]... LABEL=OBJECTS.json...
//
// OBJECTS.json: a JSON array of objects (check_kubernetes.sh converts each
// rendered overlay); CRDS.json: a JSON array of CustomResourceDefinitions.
// Prints one line per file; exits 1 if any object is invalid or has no
// schema (a kind that neither the packages nor a CRD define).
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { loadCrds } from "./crd_schema.mjs";

const [nodeModules, ...args] = process.argv.slice(2);
const require = createRequire(join(nodeModules, "noop.js"));
const crdFiles = args.filter((a) => a.startsWith("--crd=")).map((a) => a.slice("--crd=".length));
const inputs = args.filter((a) => !a.startsWith("--crd="));
const customResource = await loadCrds(nodeModules, crdFiles.flatMap((f) => JSON.parse(readFileSync(f, "utf8"))));

// --- Unknown fields, from the .d.ts declarations ---------------------------------------
// A declaration file exports one interface (the model's) or a type alias
// (Quantity, IntOrString: leaves). Types are read with a small parser:
// Type := Primary ("|" Primary)*; Primary := Array<Type> | { Members } |
// identifier | literal | (Type); Members := ("name"?: Type; | [key: string]: Type;)*
const declarations = new Map();  // .d.ts path -> {imports, type}

function tokenize(text) {
  return text.match(/"(?:[^"\\]|\\.)*"|\[key: string\]|[A-Za-z_$][\w$.]*|[{}()<>|;:?,\[\]]|\S/g) ?? [];
}

function parseType(tokens, at) {
  const options = [];
  let i = at;
  for (;;) {
    let type;
    const token = tokens[i];
    if (token === "Array" && tokens[i + 1] === "<") {
      const [element, next] = parseType(tokens, i + 2);
      type = { array: element };
      i = next + 1;  // ">"
    } else if (token === "{") {
      const members = {};
      let index = null;
      i += 1;
      while (tokens[i] !== "}") {
        if (tokens[i] === "[key: string]") {
          const [value, next] = parseType(tokens, i + 2);
          index = value;
          i = next;
        } else {
          const name = JSON.parse(tokens[i]);
          i += tokens[i + 1] === "?" ? 3 : 2;
          const [value, next] = parseType(tokens, i);
          members[name] = value;
          i = next;
        }
        if (tokens[i] === ";" || tokens[i] === ",") i += 1;
      }
      type = { members, index };
      i += 1;
    } else if (token === "(") {
      const [inner, next] = parseType(tokens, i + 1);
      type = inner;
      i = next + 1;
    } else {
      type = { name: token };
      i += 1;
    }
    options.push(type);
    if (tokens[i] !== "|") break;
    i += 1;
  }
  return [options.length === 1 ? options[0] : { union: options }, i];
}

function declaration(path) {
  if (declarations.has(path)) return declarations.get(path);
  const text = readFileSync(path, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
  const imports = {};
  for (const match of text.matchAll(/import \{([^}]*)\} from "([^"]+)"/g)) {
    for (const name of match[1].split(",").map((n) => n.trim()).filter(Boolean)) {
      imports[name] = match[2];
    }
  }
  const body = text.match(/export interface \w+(?: extends [\w, ]+)? (\{[\s\S]*?\n\})/);
  const result = { imports, type: body ? parseType(tokenize(body[1]), 0)[0] : null };
  declarations.set(path, result);
  return result;
}

function resolveImport(fromPath, specifier) {
  const resolve = createRequire(fromPath).resolve;
  return resolve(specifier).replace(/\.js$/, ".d.ts");
}

// Reports every key of value that the type does not declare, recursively.
function unknownFields(value, type, path, file, errors) {
  if (value === null || typeof value !== "object" || type === null) return;
  if (type.union) {
    const objects = type.union.filter((t) => t.members || t.name?.startsWith("I") || t.array);
    if (objects.length === 1) unknownFields(value, objects[0], path, file, errors);
    return;
  }
  if (type.array) {
    if (Array.isArray(value)) value.forEach((v, i) => unknownFields(v, type.array, `${path}/${i}`, file, errors));
    return;
  }
  if (type.name) {
    const specifier = declaration(file).imports[type.name];
    if (!specifier) return;  // a primitive or a literal
    const target = resolveImport(file, specifier);
    const { type: inner } = declaration(target);
    if (inner) unknownFields(value, inner, path, target, errors);
    return;
  }
  if (Array.isArray(value)) return;
  for (const [key, child] of Object.entries(value)) {
    const declared = type.members?.[key] ?? type.index;
    if (declared === undefined || declared === null) {
      errors.push(`${path}/${key}: not a field of the API`);
    } else {
      unknownFields(child, declared, `${path}/${key}`, file, errors);
    }
  }
}

function modelOf(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const candidates = group === ""
    ? [`kubernetes-models/${version}/${kind}`]
    : [`kubernetes-models/${group}/${version}/${kind}`,
       `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`];
  for (const name of candidates) {
    try {
      const module = require(name);
      if (module[kind]) return { Model: module[kind], declarations: require.resolve(name).replace(/\.js$/, ".d.ts") };
    } catch (error) {
      if (error.code !== "MODULE_NOT_FOUND" && error.code !== "ERR_PACKAGE_PATH_NOT_EXPORTED") throw error;
    }
  }
  return null;
}

// A custom resource's metadata, against ObjectMeta (the CRD's schema leaves
// it to the API server).
function metadataErrors(metadata) {
  const name = "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta";
  const { ObjectMeta } = require(name);
  const errors = [];
  if (metadata === null || typeof metadata !== "object") return ["no metadata"];
  try {
    new ObjectMeta(metadata).validate();
  } catch (error) {
    errors.push(`metadata: ${error.message}`);
  }
  const declarations = require.resolve(name).replace(/\.js$/, ".d.ts");
  unknownFields(metadata, declaration(declarations).type, "/metadata", declarations, errors);
  return errors.map((e) => e.replace(/: not a field of the API$/, ": not a field of ObjectMeta"));
}

let failed = false;
for (const input of inputs) {
  const [label, path] = input.split("=");
  const objects = JSON.parse(readFileSync(path, "utf8"));
  const errors = [];
  for (const object of objects) {
    const what = `${object.kind} ${object.metadata?.name}`;
    const custom = customResource(object.apiVersion ?? "", object.kind ?? "");
    if (custom !== null) {
      errors.push(...custom.validate(object).map((e) => `${what}: ${e} (CRD ${custom.crd})`));
      errors.push(...metadataErrors(object.metadata).map((e) => `${what}: ${e}`));
      continue;
    }
    const model = modelOf(object.apiVersion ?? "", object.kind ?? "");
    if (model === null) {
      errors.push(`${what}: no schema for ${object.apiVersion} ${object.kind}`);
      continue;
    }
    try {
      new model.Model(object).validate();
    } catch (error) {
      errors.push(`${what}: ${error.message}`);
    }
    const unknown = [];
    unknownFields(object, declaration(model.declarations).type, "", model.declarations, unknown);
    errors.push(...unknown.map((e) => `${what}: ${e}`));
  }
  if (errors.length > 0) {
    failed = true;
    console.log(`check_kubernetes: FAIL: ${label}: the API schema rejects:\n  - ${errors.join("\n  - ")}`);
  } else {
    console.log(`check_kubernetes: ${label}: ${objects.length} objects valid against the API schemas: OK`);
  }
}
process.exit(failed ? 1 : 0);
