// Validates every object of the given Kubernetes YAML files against the
// API's OpenAPI schemas (npm kubernetes-models: the schemas of the
// Kubernetes release it names, compiled to validators), plus the rules the
// schemas do not state that these manifests must keep: resources and a
// restricted security context on every container, probes on servers.
//   node validate.mjs FILE...   (exit 0: all valid; 1: a finding)
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

let bad = 0, count = 0;
const fail = (where, msg) => { bad++; console.error(`${where}: ${msg}`); };

function modulePath(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : [null, apiVersion];
  return group ? `kubernetes-models/${group}/${version}/${kind}` : `kubernetes-models/${version}/${kind}`;
}

function podSpecOf(o) {
  switch (o.kind) {
    case "Deployment": case "DaemonSet": case "StatefulSet": return o.spec.template.spec;
    case "CronJob": return o.spec.jobTemplate.spec.template.spec;
    case "Job": return o.spec.template.spec;
    default: return null;
  }
}

function checkPod(where, o, spec) {
  const psc = spec.securityContext || {};
  if (psc.runAsNonRoot !== true) fail(where, "pod securityContext.runAsNonRoot is not true");
  if (!psc.seccompProfile) fail(where, "pod securityContext.seccompProfile is missing");
  for (const c of spec.containers) {
    const w = `${where} container ${c.name}`;
    const r = c.resources || {};
    if (!r.requests || !r.limits) fail(w, "resources.requests and limits are required");
    else if (!r.limits.memory || !r.requests.cpu) fail(w, "a memory limit and a cpu request are required");
    const sc = c.securityContext || {};
    if (sc.allowPrivilegeEscalation !== false) fail(w, "allowPrivilegeEscalation must be false");
    if (sc.readOnlyRootFilesystem !== true) fail(w, "readOnlyRootFilesystem must be true");
    if (!sc.capabilities || !(sc.capabilities.drop || []).includes("ALL")) fail(w, "capabilities must drop ALL");
    const serves = (c.ports || []).length > 0;
    if (serves && (!c.readinessProbe || !c.livenessProbe)) fail(w, "a server needs readiness and liveness probes");
  }
}

for (const file of process.argv.slice(2)) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"));
  for (const doc of docs) {
    if (doc.errors.length) { fail(file, doc.errors.map(e => e.message).join("; ")); continue; }
    const o = doc.toJS();
    if (o === null) continue;
    const where = `${file}: ${o.kind}/${o.metadata && o.metadata.name}`;
    if (o.kind === "Kustomization") continue; // kustomize's, not the API's
    let Model;
    try {
      Model = (await import(modulePath(o.apiVersion, o.kind)))[o.kind];
    } catch (e) {
      fail(where, `unknown apiVersion/kind ${o.apiVersion}/${o.kind}`);
      continue;
    }
    try {
      new Model(o).validate();
    } catch (e) {
      fail(where, e.message);
      continue;
    }
    if (!o.metadata.namespace && o.kind !== "Namespace") fail(where, "no namespace");
    const spec = podSpecOf(o);
    if (spec) checkPod(where, o, spec);
    count++;
  }
}
if (bad) { console.error(`${bad} finding(s)`); process.exit(1); }
console.log(`${count} objects valid`);
