"""Where the serving pods run: a PodDisruptionBudget from two replicas on, replicas spread
across nodes (and zones where asked), for both the plain Deployment and KServe's predictor.

    .venv/bin/python -m pytest tests/serving/test_k8s_placement.py
"""
import dataclasses

import pytest

from serving.k8s import kserve, manifests

SETTINGS = manifests.Settings("gs://bucket/models/flowers", "tensorflow/serving:2.15.1", "flowers", "flowers")
PLAIN_POD = {"app.kubernetes.io/name": "flowers"}
KSERVE_POD = {kserve.POD_LABEL: "flowers"}


def pod_spec(objects):
    (owner,) = [o for o in objects if o["kind"] in ("Deployment", "InferenceService")]
    return owner["spec"]["template"]["spec"] if owner["kind"] == "Deployment" else owner["spec"]["predictor"]


@pytest.mark.parametrize("build, pod_labels", [(manifests.build_objects, PLAIN_POD),
                                                (kserve.build_objects, KSERVE_POD)], ids=["plain", "kserve"])
def test_two_replicas_get_a_budget_that_keeps_one_through_a_drain(build, pod_labels):
    (budget,) = [o for o in build(SETTINGS) if o["kind"] == "PodDisruptionBudget"]
    assert budget["spec"] == {"minAvailable": 1, "selector": {"matchLabels": pod_labels}}
    one = dataclasses.replace(SETTINGS, min_replicas=1)  # a budget of 1 of 1 would block every drain
    assert "PodDisruptionBudget" not in [o["kind"] for o in build(one)]


@pytest.mark.parametrize("build, pod_labels", [(manifests.build_objects, PLAIN_POD),
                                                (kserve.build_objects, KSERVE_POD)], ids=["plain", "kserve"])
@pytest.mark.parametrize("spread_zones, keys", [
    (False, ["kubernetes.io/hostname"]),
    (True, ["kubernetes.io/hostname", "topology.kubernetes.io/zone"])])
def test_replicas_spread_across_nodes_and_zones_where_asked(build, pod_labels, spread_zones, keys):
    constraints = pod_spec(build(dataclasses.replace(SETTINGS, spread_zones=spread_zones)))["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in constraints] == keys
    for constraint in constraints:  # a preference: a replica the autoscaler adds never waits on it
        assert constraint == {"maxSkew": 1, "topologyKey": constraint["topologyKey"],
                              "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": pod_labels}}


def test_the_plain_selectors_pick_the_deployment_s_pods():
    objects = {o["kind"]: o for o in manifests.build_objects(SETTINGS)}
    template_labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    for selector in (objects["Deployment"]["spec"]["selector"]["matchLabels"], objects["Service"]["spec"]["selector"],
                     objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= template_labels.items()
