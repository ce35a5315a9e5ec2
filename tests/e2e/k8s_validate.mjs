// Validates Kubernetes objects offline against their published schemas: built-in kinds with the
// `kubernetes-models` npm package (generated from Kubernetes' OpenAPI spec), Prometheus Operator
// and KEDA CRDs with @kubernetes-models/prometheus-operator and @kubernetes-models/keda, and other
// CRDs with the JSON Schemas in tests/data/k8s-schemas (each names its source). A kind with no
// schema is an error, never a pass. Helper of test_deploy_manifests.py (not a test itself).
//
// Usage: node tests/e2e/k8s_validate.mjs OBJECTS.json   (a JSON array of objects)
// Prints one line per object; exit status 1 if any is invalid or unknown.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const npm = path.resolve(process.env.TESSERA_NPM_DIR || ".deps/npm", "node_modules");
const here = path.dirname(fileURLToPath(import.meta.url));
const schemaDir = path.resolve(here, "../data/k8s-schemas");

const exists = (p) => fs.existsSync(p);
function modelPath(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const candidates = [];
  if (group === "") candidates.push(path.join(npm, "kubernetes-models", version, `${kind}.js`));
  else candidates.push(path.join(npm, "kubernetes-models", group, version, `${kind}.js`));
  if (group === "monitoring.coreos.com") {
    candidates.push(path.join(npm, "@kubernetes-models/prometheus-operator", group, version, `${kind}.js`));
  }
  if (group.endsWith("keda.sh")) candidates.push(path.join(npm, "@kubernetes-models/keda", group, version, `${kind}.js`));
  return candidates.find(exists);
}

let ajv = null;
async function jsonSchemaValidator(apiVersion, kind) {
  const [group, version] = apiVersion.split("/");
  const file = path.join(schemaDir, `${group}_${version}_${kind}.json`);
  if (!exists(file)) return null;
  if (!ajv) {
    const Ajv = (await import(path.join(npm, "ajv/dist/ajv.js"))).default;
    ajv = new Ajv({ allErrors: true, strict: false });
  }
  const validate = ajv.compile(JSON.parse(fs.readFileSync(file, "utf8")));
  return (obj) => {
    if (!validate(obj)) throw new Error(ajv.errorsText(validate.errors));
  };
}

// Pod templates embedded in CRDs (their JSON Schemas type them as objects only): validated as
// core/v1 PodTemplateSpec, the type the CRD embeds, with kubernetes-models.
const POD_TEMPLATE_PATHS = {
  LeaderWorkerSet: [["spec", "leaderWorkerTemplate", "leaderTemplate"], ["spec", "leaderWorkerTemplate", "workerTemplate"]],
};
let PodTemplateSpec = null;
async function validateEmbeddedPodTemplates(obj) {
  for (const p of POD_TEMPLATE_PATHS[obj.kind] || []) {
    const tmpl = p.reduce((o, k) => (o === undefined ? undefined : o[k]), obj);
    if (tmpl === undefined) continue;
    if (!PodTemplateSpec) {
      PodTemplateSpec = (await import(path.join(npm, "kubernetes-models", "v1", "PodTemplateSpec.js"))).PodTemplateSpec;
    }
    try {
      new PodTemplateSpec(tmpl).validate();
    } catch (e) {
      throw new Error(`${p.join(".")}: ${e.message || e}`);
    }
  }
}

const objects = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
let bad = 0;
for (const obj of objects) {
  const id = `${obj.apiVersion} ${obj.kind} ${obj.metadata?.name}`;
  try {
    const mp = modelPath(obj.apiVersion || "", obj.kind || "");
    if (mp) {
      const mod = await import(mp);
      const Model = mod[obj.kind];
      new Model(obj).validate();
    } else {
      const v = await jsonSchemaValidator(obj.apiVersion || "", obj.kind || "");
      if (!v) throw new Error("no schema for this kind (add one to tests/data/k8s-schemas with its source)");
      v(obj);
      await validateEmbeddedPodTemplates(obj);
    }
    console.log(`valid ${id}`);
  } catch (e) {
    bad++;
    console.log(`INVALID ${id}: ${String(e.message || e).slice(0, 1500)}`);
  }
}
process.exit(bad ? 1 : 0);
