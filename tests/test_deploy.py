"""Deploy files: the kustomize bundle renders the right objects, the compose stack and Slurm recipes validate."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from servers import REPO, need

sys.path.insert(0, str(REPO))

from dashboards import DEFAULT
from dashboards.generate import RULES_FILE
from recompprof._capture.settings import ENV_PREFIX, Settings

KUBE = REPO / "deploy/kubernetes"
COMPOSE = REPO / "deploy/compose"
SLURM = REPO / "deploy/slurm"
BASE_PORT = 9464
SETTING_ENV = {ENV_PREFIX + name.upper() for name in Settings.model_fields} | {"RECOMPPROF_ATTACH"}


def _kustomize(path: Path) -> dict[str, dict[str, Any]]:
    kubectl = need("kubectl", "kubectl (https://kubernetes.io/docs/tasks/tools/)")
    out = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(out.stdout)}


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, cwd=cwd)


def test_kustomize_base_renders_podmonitor_rules_and_dashboards() -> None:
    """The base renders a PodMonitor, a PrometheusRule and a grafana_dashboard ConfigMap, selectable by the release."""
    objects = _kustomize(KUBE / "base")
    assert set(objects) == {
        "PodMonitor/recompprof",
        "PrometheusRule/recompprof",
        "ConfigMap/recompprof-dashboards",
    }
    monitor = objects["PodMonitor/recompprof"]
    rule = objects["PrometheusRule/recompprof"]
    for obj in (monitor, rule):
        assert obj["metadata"]["labels"]["release"] == DEFAULT.release_label
        assert obj["metadata"]["namespace"] == DEFAULT.namespace
    spec = monitor["spec"]
    assert spec["jobLabel"] == "batch.kubernetes.io/job-name"
    assert spec["selector"] == {"matchLabels": {"recompprof.io/scrape": "true"}}
    assert spec["namespaceSelector"] == {"any": True}
    assert [e["port"] for e in spec["podMetricsEndpoints"]] == [f"recompprof-{i}" for i in range(8)]
    assert rule["spec"] == yaml.safe_load((REPO / RULES_FILE).read_text())
    dashboards = objects["ConfigMap/recompprof-dashboards"]
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    committed = {
        p.name: json.loads(p.read_text()) for p in (REPO / "dashboards/json").glob("*.json")
    }
    assert {k: json.loads(v) for k, v in dashboards["data"].items()} == committed


def test_prometheus_rule_spec_passes_promtool(tmp_path: Path) -> None:
    """The rendered PrometheusRule's spec is a rules file promtool accepts."""
    spec = _kustomize(KUBE / "base")["PrometheusRule/recompprof"]["spec"]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = _run(need("promtool", "prometheus"), "check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_example_job_is_scraped_by_the_podmonitor_and_sets_the_environment() -> None:
    """The example Job opts in to the PodMonitor, names one port per local rank and sets RECOMPPROF_*/OTEL_*."""
    objects = _kustomize(KUBE / "example")
    job = objects["Job/llama-finetune"]
    monitor = objects["PodMonitor/recompprof"]
    pod = job["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    container = pod["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/ml/trainer:1.0.0"
    nproc = int(container["command"][container["command"].index("--nproc-per-node") + 1])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {f"recompprof-{i}": BASE_PORT + i for i in range(nproc)}
    assert set(ports) <= {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    env = {e["name"]: e for e in container["env"]}
    recompprof_env = {k for k in env if k.startswith(ENV_PREFIX)}
    assert recompprof_env <= SETTING_ENV, recompprof_env - SETTING_ENV
    assert env["RECOMPPROF_PROMETHEUS_ADDR"]["value"] == "0.0.0.0"
    assert env["RECOMPPROF_PROMETHEUS_PORT"]["value"] == str(BASE_PORT)
    assert "otel" in env["RECOMPPROF_EXPORTERS"]["value"]
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    attributes = dict(
        kv.split("=", 1) for kv in env["OTEL_RESOURCE_ATTRIBUTES"]["value"].split(",")
    )
    assert attributes["k8s.pod.name"] == "$(POD_NAME)"
    assert attributes["k8s.namespace.name"] == "$(POD_NAMESPACE)"
    for name in re.findall(r"\$\((\w+)\)", env["OTEL_RESOURCE_ATTRIBUTES"]["value"]):
        assert "valueFrom" in env[name], f"{name} must come from the Downward API"
        assert list(env).index(name) < list(env).index("OTEL_RESOURCE_ATTRIBUTES")
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"].startswith("http")


def _compose() -> dict[str, Any]:
    return yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())


def test_compose_file_validates() -> None:
    """`docker-compose config -q` accepts the local stack."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose not installed (apt-get install docker-compose)")
    out = _run(binary, "-f", str(COMPOSE / "docker-compose.yml"), "config", "-q")
    assert out.returncode == 0, out.stderr


def test_compose_images_are_pinned_and_mounts_exist() -> None:
    """Every image has an explicit version tag and every bind-mounted file or directory exists in the repo."""
    services = _compose()["services"]
    assert {"prometheus", "alertmanager", "grafana", "otel-collector", "tempo"} <= set(services)
    for name, service in services.items():
        image, _, tag = service["image"].rpartition(":")
        assert image and re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: pin {service['image']}"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert (COMPOSE / source).exists(), f"{name}: {source} missing"
    prometheus_volumes = [v.split(":")[0] for v in services["prometheus"]["volumes"]]
    assert (COMPOSE / "../prometheus/recompprof-rules.yaml").resolve() in {
        (COMPOSE / v).resolve() for v in prometheus_volumes
    }
    assert "--enable-feature=exemplar-storage" in services["prometheus"]["command"]


def test_compose_prometheus_and_alertmanager_configs_validate() -> None:
    """promtool and amtool accept the stack's Prometheus and Alertmanager configurations."""
    out = _run(need("promtool", "prometheus"), "check", "config", str(COMPOSE / "prometheus.yml"))
    assert out.returncode == 0, out.stdout + out.stderr
    out = _run(
        need("amtool", "prometheus-alertmanager"), "check-config", str(COMPOSE / "alertmanager.yml")
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_grafana_provisioning_links_exemplars_to_traces_and_loads_the_dashboards() -> None:
    """Grafana's Prometheus datasource sends exemplar trace_ids to the provisioned Tempo, and the dashboards load."""
    provisioning = COMPOSE / "grafana/provisioning"
    sources = yaml.safe_load((provisioning / "datasources/datasources.yaml").read_text())[
        "datasources"
    ]
    by_type = {s["type"]: s for s in sources}
    destinations = by_type["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert destinations == [{"name": "trace_id", "datasourceUid": by_type["tempo"]["uid"]}]
    provider = yaml.safe_load((provisioning / "dashboards/dashboards.yaml").read_text())[
        "providers"
    ][0]
    grafana_mounts = dict(v.split(":")[:2] for v in _compose()["services"]["grafana"]["volumes"])
    host_dir = next(h for h, c in grafana_mounts.items() if c == provider["options"]["path"])
    assert (COMPOSE / host_dir).resolve() == (REPO / "dashboards/json").resolve()
    collector = yaml.safe_load((COMPOSE / "otel-collector.yaml").read_text())
    assert collector["exporters"]["otlp/tempo"]["endpoint"].startswith("tempo:")


def test_slurm_recipes_are_valid_and_use_real_settings(tmp_path: Path) -> None:
    """The sbatch scripts parse, set only existing RECOMPPROF_* settings, and the scrape config validates."""
    for script in sorted(SLURM.glob("*.sbatch")):
        text = script.read_text()
        assert _run("bash", "-n", str(script)).returncode == 0, script.name
        assert set(re.findall(r"export (RECOMPPROF_\w+)", text)) <= SETTING_ENV, script.name
        assert "#SBATCH" in text
    shutil.copy(SLURM / "prometheus-slurm.yml", tmp_path / "prometheus.yml")
    shutil.copy(REPO / RULES_FILE, tmp_path / "recompprof-rules.yaml")
    out = _run(need("promtool", "prometheus"), "check", "config", str(tmp_path / "prometheus.yml"))
    assert out.returncode == 0, out.stdout + out.stderr
    pushgateway = next(
        j
        for j in yaml.safe_load((SLURM / "prometheus-slurm.yml").read_text())["scrape_configs"]
        if j["job_name"] == "pushgateway"
    )
    assert pushgateway["honor_labels"] is True


def test_every_component_has_a_docs_page() -> None:
    """Dashboards, alerts and each deploy target have their page under docs/."""
    for page in ("dashboards", "alerts", "deploy-kubernetes", "deploy-slurm", "deploy-compose"):
        assert (REPO / "docs" / f"{page}.md").read_text().startswith("# "), page
