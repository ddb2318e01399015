"""Every pod python -m serving.k8s writes passes Pod Security "restricted", checked rule by rule.

The rules are the Pod Security Standards page's (https://kubernetes.io/docs/concepts/security/
pod-security-standards/, read 2026-11-28): the baseline profile's controls and the restricted
profile's on top, for the fields a pod spec of ours could set. Each rule can fail (the broken
specs below). Beyond the profile, the root file system is read-only, with an emptyDir for
temporary files. KServe's storage-initializer init container is KServe's (it injects it).

    .venv/bin/python -m pytest tests/serving/test_k8s_pod_security.py
"""
import copy

import pytest

from serving.k8s import kserve, manifests

SETTINGS = manifests.Settings("gs://bucket/models/flowers", "tensorflow/serving:2.15.1", "flowers", "flowers")
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def pods():
    """{name: (pod spec, its containers)} of every pod the command can write."""
    deployment = next(o for o in manifests.build_objects(SETTINGS) if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    predictor = kserve.build_objects(SETTINGS)[2]["spec"]["predictor"]
    return {"deployment": (pod, pod["containers"]), "kserve": (predictor, [predictor["model"]])}


def baseline_problems(pod, containers):
    problems = [f"{key}: the host's namespace" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]
    problems += [f"volume {v['name']}: hostPath" for v in pod.get("volumes", []) if "hostPath" in v]
    problems += [f"sysctl {s['name']}: not a safe one" for s in pod.get("securityContext", {}).get("sysctls", [])
                 if s["name"] not in SAFE_SYSCTLS]
    for context in [pod.get("securityContext", {})] + [c.get("securityContext", {}) for c in containers]:
        if context.get("windowsOptions", {}).get("hostProcess"):
            problems.append("windowsOptions.hostProcess")
        if context.get("seLinuxOptions", {}).get("type") not in SELINUX_TYPES or \
                {"user", "role"} & set(context.get("seLinuxOptions", {})):
            problems.append("seLinuxOptions")
        if context.get("appArmorProfile", {}).get("type") == "Unconfined":
            problems.append("appArmorProfile Unconfined")
    for c in containers:
        context = c.get("securityContext", {})
        problems += [f"{c['name']}: privileged"] if context.get("privileged") else []
        problems += [f"{c['name']}: procMount"] if context.get("procMount", "Default") != "Default" else []
        problems += [f"{c['name']}: hostPort" for p in c.get("ports", []) if p.get("hostPort")]
    return problems


def restricted_problems(pod, containers):
    """The baseline's problems, then the restricted profile's."""
    problems = baseline_problems(pod, containers)
    problems += [f"volume {v['name']}: not a restricted type" for v in pod.get("volumes", [])
                 if not set(v) - {"name"} <= RESTRICTED_VOLUMES]
    pod_context = pod.get("securityContext", {})
    pod_seccomp = pod_context.get("seccompProfile", {}).get("type")
    for c in containers:
        context, name = c.get("securityContext", {}), c["name"] if "name" in c else "model"
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            problems.append(f"{name}: runAsNonRoot is not true")
        if 0 in (context.get("runAsUser"), pod_context.get("runAsUser")):
            problems.append(f"{name}: runAsUser 0")
        if context.get("seccompProfile", {}).get("type", pod_seccomp) not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile is not RuntimeDefault or Localhost")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: capabilities add more than NET_BIND_SERVICE")
    return problems


@pytest.mark.parametrize("name", ["deployment", "kserve"])
def test_every_pod_passes_the_restricted_profile(name):
    assert restricted_problems(*pods()[name]) == []


@pytest.mark.parametrize("name", ["deployment", "kserve"])
def test_the_root_file_system_is_read_only_with_an_empty_dir_for_temporary_files(name):
    pod, containers = pods()[name]
    (scratch,) = [v for v in pod["volumes"] if "emptyDir" in v]
    for container in containers:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert {"name": scratch["name"], "mountPath": "/tmp"} in container["volumeMounts"]


def broken(change):
    pod, containers = copy.deepcopy(pods()["deployment"])
    change(pod, pod["containers"][0])
    return restricted_problems(pod, pod["containers"])


@pytest.mark.parametrize("change, expected", [
    (lambda pod, c: pod.update(hostNetwork=True), "hostNetwork: the host's namespace"),
    (lambda pod, c: pod["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "volume h: hostPath"),
    (lambda pod, c: pod["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
     "volume n: not a restricted type"),
    (lambda pod, c: c["securityContext"].update(privileged=True), "tf-serving: privileged"),
    (lambda pod, c: c["ports"][0].update(hostPort=8500), "tf-serving: hostPort"),
    (lambda pod, c: c["securityContext"].pop("allowPrivilegeEscalation"),
     "tf-serving: allowPrivilegeEscalation is not false"),
    (lambda pod, c: [pod["securityContext"].pop("runAsNonRoot"), c["securityContext"].pop("runAsNonRoot")],
     "tf-serving: runAsNonRoot is not true"),
    (lambda pod, c: c["securityContext"].update(runAsUser=0), "tf-serving: runAsUser 0"),
    (lambda pod, c: c["securityContext"].update(seccompProfile={"type": "Unconfined"}),
     "tf-serving: seccompProfile is not RuntimeDefault or Localhost"),
    (lambda pod, c: [pod["securityContext"].pop("seccompProfile"), c["securityContext"].pop("seccompProfile")],
     "tf-serving: seccompProfile is not RuntimeDefault or Localhost"),
    (lambda pod, c: c["securityContext"].update(capabilities={"drop": ["NET_RAW"]}),
     "tf-serving: capabilities do not drop ALL"),
    (lambda pod, c: c["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
     "tf-serving: capabilities add more than NET_BIND_SERVICE"),
    (lambda pod, c: pod["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
     "sysctl kernel.msgmax: not a safe one"),
])
def test_each_rule_can_fail(change, expected):
    assert expected in broken(change)
