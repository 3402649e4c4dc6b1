// Validates custom resources against the openAPIV3Schema of their
// CustomResourceDefinition, offline, the way the API server does on create:
//
//   - the object's apiVersion must be a version the CRD serves;
//   - defaults from the schema are applied first (as the API server does
//     before validating), then the JSON Schema checks run (types, required
//     fields, enums, patterns, lengths, formats int32/int64/byte/date-time):
//     Ajv, with every object schema that lists properties closed
//     (additionalProperties: false) unless it has
//     x-kubernetes-preserve-unknown-fields, because the API server rejects
//     unknown fields (kubectl apply's default --validate=strict);
//   - x-kubernetes-list-type set / map: no duplicate items / keys;
//   - x-kubernetes-validations: every CEL rule of every node present, with
//     self = that node (integers as CEL ints), by @marcbachmann/cel-js.
//     Transition rules (those naming oldSelf) do not apply on create and
//     are not run; a rule the evaluator cannot compile or run is an error,
//     so that nothing passes unchecked. Two gaps of that evaluator are
//     bridged by rewriting the rule (celSource): has() of a field of
//     anything but a chain of names (has(self[0].matches)) becomes
//     'matches' in self[0], the same test on a JSON object; and matches()
//     takes RE2's inline flags ((?i)), which JavaScript's RegExp lacks.
//
// metadata is not checked here (the CRD's schema leaves it to the API
// server's ObjectMeta): validate_schemas.mjs checks it against ObjectMeta.
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

// loadCrds(nodeModules, crds): crds is a list of CustomResourceDefinition
// objects. Returns a lookup (apiVersion, kind) -> null when no CRD defines
// the kind, else { validate(object) -> [error strings] }.
export async function loadCrds(nodeModules, crds) {
  const require = createRequire(join(nodeModules, "noop.js"));
  const Ajv = require("ajv").default;
  const cel = await import(pathToFileURL(require.resolve("@marcbachmann/cel-js")).href);
  const ajv = new Ajv({ allErrors: true, strict: false, useDefaults: true, logger: false });
  addKubernetesFormats(ajv);

  const kinds = new Map();  // "group/kind" -> { versions: Map(name -> entry), served: [names] }
  for (const crd of crds) {
    if (crd.kind !== "CustomResourceDefinition") {
      throw new Error(`not a CustomResourceDefinition: ${crd.kind} ${crd.metadata?.name}`);
    }
    const key = `${crd.spec.group}/${crd.spec.names.kind}`;
    const versions = new Map();
    for (const version of crd.spec.versions) {
      const schema = version.schema?.openAPIV3Schema;
      if (!version.served || !schema) continue;
      versions.set(version.name, { schema, validate: ajv.compile(closed(schema, true)) });
    }
    kinds.set(key, { crd: crd.metadata.name, versions });
  }

  const env = new cel.Environment({ unlistedVariablesAreDyn: true });
  env.registerFunction({
    name: "re2Matches",
    receiverType: "string",
    returnType: "bool",
    params: [{ name: "pattern", type: "string" }],
    handler: (text, pattern) => {
      let flags = "";
      const source = pattern.replace(/\(\?([ims]+)\)/g, (_, f) => { flags += f; return ""; });
      return new RegExp(source, [...new Set(flags)].join("")).test(text);
    },
  });
  const compiled = new Map();  // CEL rule text -> { run(context) } or { error }
  function rule(text) {
    if (!compiled.has(text)) {
      let entry;
      try {
        const program = env.parse(celSource(text));
        entry = { run: (context) => program(context) };
      } catch (error) {
        entry = { error: error.message };
      }
      compiled.set(text, entry);
    }
    return compiled.get(text);
  }

  return (apiVersion, kind) => {
    const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
    const known = kinds.get(`${group}/${kind}`);
    if (!known) return null;
    return {
      crd: known.crd,
      validate(object) {
        const entry = known.versions.get(version);
        if (!entry) {
          return [`${known.crd} does not serve version ${version} (served: ` +
                  `${[...known.versions.keys()].join(", ") || "none"})`];
        }
        const copy = structuredClone(object);
        copy.metadata = {};  // ObjectMeta: checked by the caller
        const errors = [];
        if (!entry.validate(copy)) {
          for (const e of entry.validate.errors) errors.push(ajvMessage(e));
        }
        kubernetesRules(entry.schema, copy, "", errors, rule);
        return errors;
      },
    };
  };
}

// The schema for Ajv: object schemas with properties and nothing said about
// other keys reject them, as the API server's strict field validation does.
function closed(schema, root = false) {
  if (Array.isArray(schema)) return schema.map((s) => closed(s));
  if (schema === null || typeof schema !== "object") return schema;
  const out = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key === "properties") {
      out.properties = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, closed(v)]));
    } else if (key === "default" || key === "enum" || key === "example") {
      out[key] = value;
    } else {
      out[key] = closed(value);
    }
  }
  if (root && out.properties?.metadata) out.properties.metadata = { type: "object" };
  if (out.properties && out.additionalProperties === undefined &&
      !out["x-kubernetes-preserve-unknown-fields"]) {
    out.additionalProperties = false;
  }
  return out;
}

function addKubernetesFormats(ajv) {
  ajv.addFormat("int32", { type: "number", validate: (n) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
  ajv.addFormat("int64", { type: "number", validate: (n) => Number.isInteger(n) });
  ajv.addFormat("byte", /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/);
  ajv.addFormat("date-time", /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})$/);
}

function ajvMessage(error) {
  const where = error.instancePath || "/";
  if (error.keyword === "additionalProperties") {
    return `${where === "/" ? "" : where}/${error.params.additionalProperty}: not a field of the schema`;
  }
  if (error.keyword === "enum") {
    return `${where}: ${error.message}: ${error.params.allowedValues.map((v) => JSON.stringify(v)).join(", ")}`;
  }
  return `${where}: ${error.message}`;
}

// The value as CEL sees it: integers of integer fields as int (BigInt),
// other numbers as double.
function celValue(schema, value) {
  if (Array.isArray(value)) return value.map((v) => celValue(schema?.items, v));
  if (value !== null && typeof value === "object") {
    const out = {};
    for (const [key, child] of Object.entries(value)) {
      const childSchema = schema?.properties?.[key] ??
        (typeof schema?.additionalProperties === "object" ? schema.additionalProperties : undefined);
      out[key] = celValue(childSchema, child);
    }
    return out;
  }
  if (typeof value === "number" && Number.isInteger(value) &&
      (schema === undefined || schema.type === "integer" || schema["x-kubernetes-int-or-string"])) {
    return BigInt(value);
  }
  return value;
}

// The checks Ajv does not know: list types and CEL rules, at every node
// of the object that the schema describes.
function kubernetesRules(schema, value, path, errors, rule) {
  if (value === undefined || value === null || !schema) return;
  for (const validation of schema["x-kubernetes-validations"] ?? []) {
    if (/\boldSelf\b/.test(validation.rule)) continue;  // transition rule: updates only
    const compiled = rule(validation.rule);
    let result;
    try {
      if (compiled.error) throw new Error(compiled.error);
      result = compiled.run({ self: celValue(schema, value) });
    } catch (error) {
      errors.push(`${path || "/"}: the rule ${JSON.stringify(validation.rule)} could not be ` +
                  `evaluated: ${error.message}`);
      continue;
    }
    if (result !== true) {
      errors.push(`${path || "/"}: ${validation.message ?? `failed rule: ${validation.rule}`}`);
    }
  }
  if (Array.isArray(value)) {
    const listType = schema["x-kubernetes-list-type"];
    if (listType === "set" || listType === "map") {
      const keys = schema["x-kubernetes-list-map-keys"] ?? [];
      const seen = new Set();
      value.forEach((item, i) => {
        const key = JSON.stringify(listType === "set" ? item : keys.map((k) => item?.[k]));
        if (seen.has(key)) errors.push(`${path}/${i}: duplicate ${listType === "set" ? "item" : `key ${key}`}`);
        seen.add(key);
      });
    }
    value.forEach((item, i) => kubernetesRules(schema.items, item, `${path}/${i}`, errors, rule));
    return;
  }
  if (typeof value === "object") {
    for (const [key, child] of Object.entries(value)) {
      const childSchema = schema.properties?.[key] ??
        (typeof schema.additionalProperties === "object" ? schema.additionalProperties : undefined);
      kubernetesRules(childSchema, child, `${path}/${key}`, errors, rule);
    }
  }
}

// The rule for @marcbachmann/cel-js: has(E.f) where E is not a chain of
// names -> ('f' in E); .matches( -> .re2Matches( (RE2's inline flags). String
// literals are left as they are.
export function celSource(text) {
  let out = "";
  let i = 0;
  while (i < text.length) {
    const literal = stringLiteralAt(text, i);
    if (literal > i) {
      out += text.slice(i, literal);
      i = literal;
      continue;
    }
    if (text.startsWith(".matches(", i)) {
      out += ".re2Matches(";
      i += ".matches(".length;
      continue;
    }
    if (text.startsWith("has(", i) && !/[\w.]/.test(text[i - 1] ?? "")) {
      const close = matchingParen(text, i + 3);
      const argument = text.slice(i + 4, close).trim();
      if (!/^[A-Za-z_]\w*(\s*\.\s*[A-Za-z_]\w*)+$/.test(argument)) {
        const dot = lastTopLevelDot(argument);
        if (dot > 0) {
          const field = argument.slice(dot + 1).trim();
          out += `('${field}' in (${celSource(argument.slice(0, dot))}))`;
          i = close + 1;
          continue;
        }
      }
    }
    out += text[i];
    i += 1;
  }
  return out;
}

// End of the string literal starting at i (", ', r"..", """..."""), or i.
function stringLiteralAt(text, i) {
  let j = i;
  if ((text[j] === "r" || text[j] === "R") && /["']/.test(text[j + 1] ?? "") && !/\w/.test(text[j - 1] ?? "")) j += 1;
  const quote = text[j];
  if (quote !== '"' && quote !== "'") return i;
  const raw = j > i;
  const triple = text.startsWith(quote.repeat(3), j);
  const end = triple ? quote.repeat(3) : quote;
  let k = j + end.length;
  while (k < text.length && !text.startsWith(end, k)) k += !raw && text[k] === "\\" ? 2 : 1;
  return k + end.length;
}

function matchingParen(text, open) {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    const literal = stringLiteralAt(text, i);
    if (literal > i) { i = literal - 1; continue; }
    if ("([{".includes(text[i])) depth += 1;
    if (")]}".includes(text[i]) && --depth === 0) return i;
  }
  throw new Error(`unbalanced parentheses in ${text}`);
}

function lastTopLevelDot(text) {
  let depth = 0;
  let dot = -1;
  for (let i = 0; i < text.length; i++) {
    const literal = stringLiteralAt(text, i);
    if (literal > i) { i = literal - 1; continue; }
    if ("([{".includes(text[i])) depth += 1;
    if (")]}".includes(text[i])) depth -= 1;
    if (text[i] === "." && depth === 0) dot = i;
  }
  return dot;
}
