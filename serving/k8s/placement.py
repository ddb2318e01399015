"""Where the serving pods run and who may reach them: spread across nodes (and zones where
asked), a PodDisruptionBudget so a drain leaves one replica serving, and a NetworkPolicy
admitting the serving ports only from the namespaces or pods --allow_from names.

Both the plain Deployment (serving/k8s/manifests.py) and KServe's predictor
(serving/k8s/kserve.py) take these, each with the labels its pods carry.

    .venv/bin/python -m serving.k8s --model_base_path gs://B/run/export/image_classifier --output_dir k8s/ --allow_from ns:frontend
"""
import re

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace since Kubernetes 1.22
ALLOW_NAMESPACE = re.compile(r"ns:([a-z0-9]([-a-z0-9]*[a-z0-9])?)\Z")
ALLOW_PODS = re.compile(r"pods:([A-Za-z0-9][-A-Za-z0-9_./]*)=([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")


def spread_constraints(settings, pod_labels):
    """One replica per node where the nodes allow it (and per zone with --spread_zones); a
    preference, not a rule: a replica the autoscaler adds is never left pending for it."""
    keys = [HOST, ZONE] if settings.spread_zones else [HOST]
    return [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": pod_labels}} for key in keys]


def disruption_budget(settings, meta, pod_labels):
    """A PodDisruptionBudget keeping one replica through a voluntary disruption (a node drain,
    an upgrade), when there are two or more; None for one (it would block every drain)."""
    if settings.min_replicas < 2:
        return None
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta,
            "spec": {"minAvailable": 1, "selector": {"matchLabels": pod_labels}}}


def peer(allowed):
    """A NetworkPolicy peer of one checked --allow_from value."""
    namespace = ALLOW_NAMESPACE.match(allowed)
    if namespace:
        return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace.group(1)}}}
    key, value = ALLOW_PODS.match(allowed).group(1, 2)
    return {"podSelector": {"matchLabels": {key: value or ""}}}


def network_policy(settings, meta, pod_labels, ports):
    """Ingress to the serving ports (ports) from --allow_from's peers only; None without
    --allow_from."""
    if not settings.allow_from:
        return None
    ports = [{"protocol": "TCP", "port": port} for port in ports]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta,
            "spec": {"podSelector": {"matchLabels": pod_labels}, "policyTypes": ["Ingress"],
                     "ingress": [{"from": [peer(a) for a in settings.allow_from], "ports": ports}]}}


def open_ports_line(settings, ports):
    """What the output says when no NetworkPolicy is written; None when one is."""
    if settings.allow_from:
        return None
    return (f"the serving ports {' and '.join(map(str, ports))} are open "
            "to every pod of the cluster (no NetworkPolicy); pass --allow_from ns:NAMESPACE or "
            "--allow_from pods:KEY=VALUE to admit only those")
