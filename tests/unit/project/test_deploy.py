"""deploy/: every artifact checked with a real tool where this machine has one, and against
each other (docs/operating.md#what-was-exercised-here).

- systemd units: ``systemd-analyze verify``, which must print nothing (it reports unknown keys
  and bad values as warnings, with exit code 0).
- compose: ``docker-compose config`` (Debian's docker-compose validates the file against the
  compose schema without an engine), then every service's config file, ports, volumes and
  certificates cross-checked; its Prometheus config with ``promtool check config``.
- Kubernetes: the manifests parsed and cross-checked (StatefulSets, headless Services,
  probes, PVCs, the certificate Secret, PodDisruptionBudgets), and every pod's configuration
  loaded as the pod would load it (its environment, its host name).
- certificates: ``metaquorum dev certs`` run on the compose and Kubernetes node lists; each
  node's certificate must name the host its peers dial.
No container engine or Kubernetes cluster runs here: nothing was built or deployed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from quorum.config import load_config
from quorum.security.identity import ROLE_BROKER, ROLE_CONTROLLER, node_server_name, node_uri

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
IMAGE = "localhost/metaquorum:0.1.0"


def metaquorum_script() -> Path:
    script = Path(sys.executable).parent / "metaquorum"
    if not script.exists():
        pytest.skip(f"the metaquorum console script is not installed beside {sys.executable}")
    return script


def read_env_file(path: Path) -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )


def certificate_names(pem: Path) -> tuple[list[str], list[str]]:
    """(URI SANs, DNS SANs) of the first certificate in ``pem``."""
    cert = x509.load_pem_x509_certificates(pem.read_bytes())[0]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return (
        san.get_values_for_type(x509.UniformResourceIdentifier),
        san.get_values_for_type(x509.DNSName),
    )


def dev_certs(out: Path, deploy_dir: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "quorum.cli", "dev", "certs", "--out", str(out),
         "--deploy-dir", str(deploy_dir), "--cluster-id", CLUSTER_ID],
        cwd=REPO, check=True, capture_output=True, timeout=60,
    )  # fmt: skip


# ----- systemd -------------------------------------------------------------------------------


def verify_unit(unit: Path, tmp_path: Path) -> str:
    """``systemd-analyze verify`` of ``unit`` as installed here (the console script of this
    environment instead of /opt/metaquorum/bin/metaquorum): its output."""
    installed = tmp_path / unit.name
    installed.write_text(
        unit.read_text().replace("/opt/metaquorum/bin/metaquorum", str(metaquorum_script()))
    )
    result = subprocess.run(
        ["systemd-analyze", "verify", str(installed)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 or output, "systemd-analyze failed without saying why"
    return output if result.returncode == 0 else f"exit {result.returncode}: {output}"


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_systemd_unit_passes_systemd_analyze_verify(role: str, tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed: the units were not verified")
    unit = DEPLOY / "systemd" / f"metaquorum-{role}.service"
    assert verify_unit(unit, tmp_path) == ""
    text = unit.read_text()
    assert f"metaquorum {role} start --config /etc/metaquorum/{role}.toml" in text
    assert "--cluster-id ${METAQUORUM_CLUSTER_ID} --ignore-formatted" in text
    # The config the unit names, with the environment file's variables, is a valid node.
    environ = read_env_file(DEPLOY / "systemd" / "metaquorum.env")
    if role == "broker":
        environ["METAQUORUM_NODE_ID"] = "101"
    config = load_config(DEPLOY / "systemd" / f"{role}.toml", environ=environ)
    assert config.process_roles == {role}
    assert str(config.cluster_id) == environ["METAQUORUM_CLUSTER_ID"]
    assert all(str(d).startswith("/var/lib/metaquorum/") for d in config.data_dirs)
    assert "StateDirectory=metaquorum" in text  # creates /var/lib/metaquorum for the user


def test_systemd_analyze_verify_catches_a_bad_unit(tmp_path: Path) -> None:
    """The check bites: a misspelled key and a bad value are reported."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    bad = tmp_path / "src" / "metaquorum-controller.service"
    bad.parent.mkdir()
    text = (DEPLOY / "systemd" / "metaquorum-controller.service").read_text()
    bad.write_text(text.replace("Restart=on-failure", "Restart=sometimes\nRestartSecs=5"))
    output = verify_unit(bad, tmp_path)
    assert "sometimes" in output
    assert "RestartSecs" in output


# ----- the container image --------------------------------------------------------------------


def containerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of deploy/container/Containerfile, continuations joined."""
    text = (DEPLOY / "container" / "Containerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def test_containerfile_copies_what_exists_and_runs_the_console_script() -> None:
    instructions = containerfile()
    for instruction, arguments in instructions:
        if instruction == "COPY" and not arguments.startswith("--from"):
            for source in arguments.split()[:-1]:
                assert (REPO / source).exists(), f"COPY {source}: not in the repository"
        if instruction == "FROM":
            image = arguments.split()[0]
            assert ":" in image and not image.endswith(":latest"), f"unpinned base {image}"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "metaquorum" in pyproject["project"]["scripts"]
    assert ("ENTRYPOINT", '["metaquorum"]') in instructions
    assert ("USER", "10001:10001") in instructions
    exposed = {int(p) for i, a in instructions if i == "EXPOSE" for p in a.split()}
    assert exposed == {9092, 9093, 9404, 9405}
    # pip installs with the project's pins.
    assert any("-c constraints.txt" in a for i, a in instructions if i == "RUN")


# ----- compose --------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    return data


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """container path -> source (a volume name or a path relative to deploy/compose)."""
    result = {}
    for entry in service.get("volumes", []):
        source, target = entry.split(":")[:2]
        result[target] = source
    return result


def test_compose_file_passes_docker_compose_config() -> None:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is not installed: the compose schema was not checked")
    result = subprocess.run(
        ["docker-compose", "-f", "compose.yaml", "config", "-q"],
        cwd=DEPLOY / "compose", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_cluster_is_consistent(tmp_path: Path) -> None:
    data = compose()
    services = data["services"]
    nodes = {name: s for name, s in services.items() if name.startswith(("controller-", "broker-"))}
    assert sorted(nodes) == [
        "broker-101", "broker-102", "controller-1", "controller-2", "controller-3",
    ]  # fmt: skip
    declared_volumes = set(data["volumes"])
    certs_mounts = mounts(services["certs"])
    assert services["certs"]["build"]["dockerfile"] == "deploy/container/Containerfile"
    assert (DEPLOY / "compose" / services["certs"]["build"]["context"]).resolve() == REPO
    deploy_dir = services["certs"]["command"][
        services["certs"]["command"].index("--deploy-dir") + 1
    ]
    metrics_targets = set()
    for name, service in nodes.items():
        role, node_id = name.split("-")
        assert service["image"] == services["certs"]["image"] == IMAGE
        assert service["hostname"] == name
        assert service["depends_on"]["certs"]["condition"] == "service_completed_successfully"
        volumes = mounts(service)
        config_file = DEPLOY / "compose" / volumes["/etc/metaquorum/node.toml"]
        assert config_file.is_file(), config_file
        # The certs service sees the same file in its --deploy-dir.
        assert certs_mounts[f"{deploy_dir}/{config_file.name}"] == f"./{config_file.name}"
        config = load_config(config_file, environ={"METAQUORUM_CLUSTER_ID": CLUSTER_ID})
        assert config.node_id == int(node_id)
        assert config.process_roles == {role}
        assert config.listener.host == name
        assert {f"{a.host}" for a in config.controller_quorum_voters.values()} == {
            n for n in nodes if n.startswith("controller-")
        }
        published = {int(p.rsplit(":", 1)[1].split("/")[0]) for p in service["ports"]}
        assert published == {config.listener.port}
        # Data in the node's own volume, certificates from the shared certs volume.
        assert volumes["/var/lib/metaquorum"] == f"{name}-data"
        for directory in config.data_dirs:
            assert str(directory).startswith("/var/lib/metaquorum/")
        assert volumes["/etc/metaquorum/tls"] == "certs" == certs_mounts["/etc/metaquorum/tls"]
        assert str(config.ssl_keystore_location) == f"/etc/metaquorum/tls/node-{node_id}.pem"
        assert str(config.ssl_truststore_location) == "/etc/metaquorum/tls/ca.pem"
        assert {v for v in volumes.values() if not v.startswith(".")} <= declared_volumes
        assert config.health_listener is not None
        assert f"127.0.0.1:{config.health_listener.port}" in " ".join(
            service["healthcheck"]["test"]
        )
        assert config.metrics_listener is not None
        metrics_targets.add(f"{name}:{config.metrics_listener.port}")
        start = f"exec metaquorum {role} start --config /etc/metaquorum/node.toml"
        assert start in service["command"][0]
    # Prometheus scrapes exactly the nodes' metrics listeners, with a config promtool accepts.
    prometheus = services["prometheus"]
    config_path = DEPLOY / "compose" / mounts(prometheus)["/etc/prometheus/prometheus.yml"]
    scrape = yaml.safe_load(config_path.read_text())
    targets = {
        t for job in scrape["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    }
    assert targets == metrics_targets
    if shutil.which("promtool") is not None:
        checked = subprocess.run(
            ["promtool", "check", "config", str(config_path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert checked.returncode == 0, checked.stdout + checked.stderr
    # The certificates the certs service writes name the host each node is dialled at.
    dev_certs(tmp_path, DEPLOY / "compose")
    for name in nodes:
        node_id = int(name.split("-")[1])
        uris, dns = certificate_names(tmp_path / f"node-{node_id}.pem")
        role = ROLE_CONTROLLER if name.startswith("controller") else ROLE_BROKER
        assert uris == [node_uri(CLUSTER_ID, role, node_id)]
        assert name in dns
        assert node_server_name(CLUSTER_ID, role, node_id) in dns


# ----- Kubernetes -----------------------------------------------------------------------------


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> object, from every file kustomization.yaml lists."""
    kustomization = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for resource in kustomization["resources"]:
        for doc in yaml.safe_load_all((DEPLOY / "kubernetes" / resource).read_text()):
            objects[(doc["kind"], doc["metadata"]["name"])] = doc
    objects[("Kustomization", "")] = kustomization
    return objects


def pod_environment(container: dict[str, Any], pod_name: str) -> dict[str, str]:
    """The container's environment as the kubelet gives it ($(VAR) expanded), and HOSTNAME."""
    environ = {"HOSTNAME": pod_name}
    for entry in container["env"]:
        if "valueFrom" in entry:
            assert entry["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
            environ[entry["name"]] = pod_name
        else:
            environ[entry["name"]] = re.sub(
                r"\$\(([A-Z_]+)\)", lambda m: environ[m.group(1)], str(entry["value"])
            )
    return environ


@pytest.mark.parametrize(("role", "replicas", "base"), [("controller", 3, 1), ("broker", 2, 101)])
def test_kubernetes_statefulset_is_consistent(
    role: str, replicas: int, base: int, tmp_path: Path
) -> None:
    objects = manifests()
    namespace = objects[("Kustomization", "")]["namespace"]
    assert ("Namespace", namespace) in objects
    name = f"metaquorum-{role}"
    sts = objects[("StatefulSet", name)]
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"] == labels
    assert spec["replicas"] == replicas
    assert spec["podManagementPolicy"] == "Parallel"
    # The headless Service gives the stable names the voters use, before the pods are ready.
    service = objects[("Service", spec["serviceName"])]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == labels
    # A PodDisruptionBudget keeps a majority of controllers (and most brokers) up.
    pdb = objects[("PodDisruptionBudget", name)]
    assert pdb["spec"]["selector"]["matchLabels"] == labels
    assert pdb["spec"]["maxUnavailable"] <= max(1, (replicas - 1) // 2)
    # Storage from a PersistentVolumeClaim template, certificates from the Secret.
    claims = {c["metadata"]["name"]: c for c in spec["volumeClaimTemplates"]}
    assert claims["data"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "metaquorum-tls"
    config_map = objects[("ConfigMap", volumes["config"]["configMap"]["name"])]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # the image's USER
    (container,) = pod["containers"]
    (init,) = pod["initContainers"]
    assert container["image"] == init["image"] == IMAGE
    assert container["env"] == init["env"]
    assert init["args"][:2] == ["storage", "format"]
    assert "--ignore-formatted" in init["args"]
    assert container["args"][:2] == [role, "start"]
    config_path = container["args"][container["args"].index("--config") + 1]
    mount_paths = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert set(mount_paths) <= {*volumes, *claims}
    assert config_path == f"{mount_paths['config']}/{Path(config_path).name}"
    config_text = config_map["data"][Path(config_path).name]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {s["targetPort"] for s in service["spec"]["ports"]} <= set(ports)

    for ordinal in range(replicas):
        pod_name = f"{name}-{ordinal}"
        environ = pod_environment(container, pod_name)
        path = tmp_path / f"{pod_name}.toml"
        path.write_text(config_text)
        config = load_config(path, environ=environ)
        assert config.node_id == base + ordinal
        assert str(config.cluster_id) == CLUSTER_ID
        assert str(config.ssl_keystore_location) == f"{mount_paths['tls']}/{pod_name}.pem"
        assert str(config.ssl_truststore_location) == f"{mount_paths['tls']}/ca.pem"
        assert config.listener.port == ports[role]
        for directory in config.data_dirs:
            assert str(directory).startswith(mount_paths["data"] + "/")
        # Readiness: the kubelet's gRPC probe on the plaintext health listener.
        assert config.health_listener is not None
        assert container["readinessProbe"]["grpc"]["port"] == config.health_listener.port
        assert ports["health"] == config.health_listener.port
        assert config.metrics_listener is not None
        assert ports["metrics"] == config.metrics_listener.port
        annotations = spec["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(config.metrics_listener.port)
        # Voters are the controller pods' stable DNS names.
        controller_sts = objects[("StatefulSet", "metaquorum-controller")]["spec"]
        expected = {
            1 + i: f"metaquorum-controller-{i}.{controller_sts['serviceName']}.{namespace}"
            f".svc.cluster.local"
            for i in range(controller_sts["replicas"])
        }
        assert {n: a.host for n, a in config.controller_quorum_voters.items()} == expected


def test_kubernetes_certificates_name_every_pod(tmp_path: Path) -> None:
    """deploy/kubernetes/certs/ lists the pods for `dev certs`: each certificate carries the
    node id the pod's ordinal gives it and the DNS name its peers dial."""
    objects = manifests()
    namespace = objects[("Kustomization", "")]["namespace"]
    dev_certs(tmp_path, DEPLOY / "kubernetes" / "certs")
    for role, base in (("controller", 1), ("broker", 101)):
        sts = objects[("StatefulSet", f"metaquorum-{role}")]["spec"]
        for ordinal in range(sts["replicas"]):
            pod = f"metaquorum-{role}-{ordinal}"
            assert (DEPLOY / "kubernetes" / "certs" / f"{pod}.toml").is_file()
            uris, dns = certificate_names(tmp_path / f"node-{base + ordinal}.pem")
            assert uris == [node_uri(CLUSTER_ID, role, base + ordinal)]
            assert node_server_name(CLUSTER_ID, role, base + ordinal) in dns
            assert f"{pod}.{sts['serviceName']}.{namespace}.svc.cluster.local" in dns
