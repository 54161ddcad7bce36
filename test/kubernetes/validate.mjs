// Validates Kubernetes objects against the API's JSON schemas (kubernetes-models), for
// test/e2e/stack-kubernetes.e2e-spec.ts: a JSON array of objects on stdin, a JSON array of
// { kind, name, error } on stdout (error absent when the object is valid). A process of its own
// because kubernetes-models is ESM only.
import { readFileSync } from 'node:fs';

const objects = JSON.parse(readFileSync(0, 'utf8'));
const results = [];
for (const object of objects) {
  const [group, version] = object.apiVersion.includes('/') ? object.apiVersion.split('/') : [undefined, object.apiVersion];
  const result = { kind: object.kind, name: object.metadata?.name };
  try {
    const models = await import(group === undefined ? `kubernetes-models/${version}` : `kubernetes-models/${group}/${version}`);
    const Model = models[object.kind];
    if (Model === undefined) throw new Error(`no schema for ${object.apiVersion} ${object.kind}`);
    new Model(object).validate();
  } catch (error) {
    result.error = error instanceof Error ? error.message : String(error);
  }
  results.push(result);
}
process.stdout.write(JSON.stringify(results));
