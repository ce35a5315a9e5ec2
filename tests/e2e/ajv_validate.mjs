// Validates JSON documents against JSON Schemas with ajv (draft 2020-12, formats
// from ajv-formats): an oracle independent of Tessera's grammar compiler.
// stdin: [{"schema": {...}, "text": "..."}, ...]; stdout: [{"ok": bool, "error": "..."}, ...].
// Used by test_structured_outputs.py; not a test itself.
import { createRequire } from "node:module";
import path from "node:path";
import fs from "node:fs";

const npmDir = process.env.TESSERA_NPM_DIR || path.join(process.cwd(), ".deps/npm");
const require = createRequire(path.join(npmDir, "package.json"));
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;

const cases = JSON.parse(fs.readFileSync(0, "utf8"));
const out = [];
for (const c of cases) {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  let doc;
  try {
    doc = JSON.parse(c.text);
  } catch (e) {
    out.push({ ok: false, error: "not JSON: " + e.message });
    continue;
  }
  try {
    const validate = ajv.compile(c.schema);
    const ok = validate(doc);
    out.push({ ok, error: ok ? "" : ajv.errorsText(validate.errors) });
  } catch (e) {
    out.push({ ok: false, error: "schema: " + e.message });
  }
}
process.stdout.write(JSON.stringify(out));
