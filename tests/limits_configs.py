"""The shipped configurations and their containers' memory limits, read from deploy/ (for
tests/test_shipped_limits.py): the sidecar (deploy/kubernetes/configmap.yaml with the
``ragmon`` container of deployment.yaml), the pool (the ConfigMap and Deployment of
deploy/kubernetes/ragmon-pool.yaml) and compose (the file deploy/compose.yaml mounts as the
``ragmon`` service's config, with that service's ``mem_limit``). ``local_config`` changes only
what cannot work here; ``effective`` is the configuration ``ragmon run`` then runs with."""

from __future__ import annotations

import copy
import json
import re
import socket
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ragmon.config import TOKEN_ENVIRONMENT, Config, config_from_mapping

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
SHARE = 0.75
"""Peak RSS must stay within this share of the container's memory limit."""
MiB = 1024 * 1024


_K8S_UNITS = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "": 1,
}
_K8S_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGTPE]i|[kMGTPE]|)$")
_COMPOSE_UNITS = {"b": 1, "k": 2**10, "kb": 2**10, "m": 2**20, "mb": 2**20, "g": 2**30, "gb": 2**30}
_COMPOSE_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)$")


def kubernetes_bytes(quantity: object) -> int:
    """A Kubernetes memory quantity (``512Mi``, ``1Gi``, ``768M``, ``1000000``) in bytes."""
    match = _K8S_QUANTITY.match(str(quantity).strip())
    if match is None:
        raise ValueError(f"not a Kubernetes memory quantity: {quantity!r}")
    return int(float(match.group(1)) * _K8S_UNITS[match.group(2)])


def compose_bytes(size: object) -> int:
    """A compose memory size (``1g``, ``512m``, ``768M``, ``1024k``, ``1b`` or a number of bytes:
    binary units, as Docker reads them) in bytes."""
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    match = _COMPOSE_SIZE.match(str(size).strip().lower())
    if match is None or match.group(2) not in _COMPOSE_UNITS and match.group(2) != "":
        raise ValueError(f"not a compose memory size: {size!r}")
    return int(float(match.group(1)) * _COMPOSE_UNITS.get(match.group(2), 1))


@dataclass(frozen=True)
class Shipped:
    """One shipped configuration with its container's memory limit."""

    name: str
    origin: str
    """Where the configuration and the limit are read from."""
    config: Mapping[str, Any]
    """The TOML as shipped."""
    limit: int
    """The container's memory limit, in bytes."""
    tokens: tuple[str, ...] = ()
    """Token variables (``TOKEN_ENVIRONMENT``) the manifest sets: each gets a random token here."""
    mounts: Mapping[str, Path] = field(default_factory=dict)
    """Files mounted into the container: path inside -> the repository's file."""

    @property
    def budget(self) -> int:
        """``SHARE`` of the limit: the most peak RSS may be."""
        return int(SHARE * self.limit)


def _yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _one(docs: Sequence[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name or ''} in the manifests, found {len(found)}")
    return found[0]


def _ragmon_container(deployment: dict[str, Any]) -> dict[str, Any]:
    spec = deployment["spec"]["template"]["spec"]
    containers = [c for c in [*spec.get("initContainers", []), *spec.get("containers", [])] if c["name"] == "ragmon"]
    if len(containers) != 1:
        raise AssertionError(f"{deployment['metadata']['name']}: expected one container named ragmon")
    container: dict[str, Any] = containers[0]
    return container


def _container_limit(container: dict[str, Any], where: str) -> int:
    memory = container.get("resources", {}).get("limits", {}).get("memory")
    if memory is None:
        raise AssertionError(f"{where}: the ragmon container sets no resources.limits.memory")
    return kubernetes_bytes(memory)


def _container_tokens(container: dict[str, Any]) -> tuple[str, ...]:
    return tuple(e["name"] for e in container.get("env", []) if e["name"] in TOKEN_ENVIRONMENT)


def _configmap_toml(configmap: dict[str, Any]) -> dict[str, Any]:
    return tomllib.loads(configmap["data"]["ragmon.toml"])


def sidecar() -> Shipped:
    """The native sidecar: configmap.yaml's ragmon.toml, deployment.yaml's limit."""
    configmap = _one(_yaml_docs(K8S / "configmap.yaml"), "ConfigMap")
    deployment = _one(_yaml_docs(K8S / "deployment.yaml"), "Deployment")
    container = _ragmon_container(deployment)
    return Shipped(
        "sidecar", "deploy/kubernetes/configmap.yaml + deployment.yaml", _configmap_toml(configmap),
        _container_limit(container, "deployment.yaml"), _container_tokens(container),
    )


def pool() -> Shipped:
    """The pool: ragmon-pool.yaml's ConfigMap ragmon-pool-config and Deployment ragmon-pool."""
    docs = _yaml_docs(K8S / "ragmon-pool.yaml")
    configmap = _one(docs, "ConfigMap", "ragmon-pool-config")
    container = _ragmon_container(_one(docs, "Deployment", "ragmon-pool"))
    return Shipped(
        "pool", "deploy/kubernetes/ragmon-pool.yaml", _configmap_toml(configmap),
        _container_limit(container, "ragmon-pool.yaml"), _container_tokens(container),
    )


def compose() -> Shipped:
    """compose.yaml's ``ragmon`` service: the config file it mounts, its memory limit."""
    service = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["ragmon"]
    mounts: dict[str, Path] = {}
    for volume in service.get("volumes", []):
        host, inside, *_ = str(volume).split(":")
        if host.startswith("."):
            mounts[inside] = (DEPLOY / host).resolve()
    config_path = service.get("environment", {}).get("RAGMON_CONFIG", "/etc/ragmon/ragmon.toml")
    if config_path not in mounts:
        raise AssertionError(f"compose.yaml: the ragmon service mounts no file at {config_path}")
    limit = service.get("mem_limit", service.get("deploy", {}).get("resources", {}).get("limits", {}).get("memory"))
    if limit is None:
        raise AssertionError("compose.yaml: the ragmon service sets no memory limit (mem_limit)")
    tokens = tuple(name for name in service.get("environment", {}) if name in TOKEN_ENVIRONMENT)
    return Shipped(
        "compose", f"deploy/compose.yaml (config {mounts[config_path].relative_to(ROOT)})",
        tomllib.loads(mounts[config_path].read_text()), compose_bytes(limit), tokens, mounts,
    )


CONFIGURATIONS: dict[str, Callable[[], Shipped]] = {"sidecar": sidecar, "pool": pool, "compose": compose}
"""Every shipped configuration, by name."""


def effective(shipped_config: Shipped) -> Config:
    """The configuration ``ragmon run`` runs with here (defaults where a key is not set)."""
    return config_from_mapping(local_config(shipped_config.config, shipped_config.mounts, "http://127.0.0.1:9/"))


def local_config(config: Mapping[str, Any], mounts: Mapping[str, Path], nowhere: str,
                 judge: str = "") -> dict[str, Any]:
    """``config`` with what cannot work here changed: listeners on 127.0.0.1 port 0 (an empty
    one stays off), mounted files read from the repository, probe URLs and the judge's onward
    endpoint to ``nowhere``, a judge ``base_url`` to ``judge``."""
    local = copy.deepcopy(dict(config))
    for section, keys in (("receiver", ("http", "grpc")), ("metrics", ("listen",))):
        table = local.setdefault(section, {})
        for key in keys:
            if table.get(key) != "":
                table[key] = "127.0.0.1:0"
    scoring = local.get("scoring", {})
    if scoring.get("golden"):
        scoring["golden"] = str(_mounted(scoring["golden"], mounts))
    for probe in local.get("probe", []):
        probe["url"] = nowhere
        if probe.get("dataset"):
            probe["dataset"] = str(_mounted(probe["dataset"], mounts))
    judge_table = local.get("judge", {})
    if judge_table.get("base_url"):
        judge_table["base_url"] = judge or nowhere
    if judge_table.get("export_endpoint"):
        judge_table["export_endpoint"] = nowhere
    return local


def _mounted(path: str, mounts: Mapping[str, Path]) -> Path:
    if path not in mounts:
        raise AssertionError(f"{path} is not mounted into the container: it cannot be read")
    return mounts[path]


def to_toml(data: Mapping[str, Any]) -> str:
    """TOML text for a configuration (tables of scalars, lists, inline tables; arrays of tables)."""
    lines: list[str] = []
    for name, value in data.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                lines += [f"[[{_key(name)}]]", *(f"{_key(k)} = {_value(v)}" for k, v in item.items()), ""]
        elif isinstance(value, dict):
            scalars = {k: v for k, v in value.items() if not isinstance(v, dict) or name != "pricing"}
            lines += [f"[{_key(name)}]", *(f"{_key(k)} = {_value(v)}" for k, v in scalars.items()), ""]
            for key, table in value.items():
                if name == "pricing" and isinstance(table, dict):
                    lines += [f"[{_key(name)}.{_key(key)}]", *(f"{_key(k)} = {_value(v)}" for k, v in table.items()), ""]
        else:
            raise AssertionError(f"unexpected top-level TOML value {name!r}")
    return "\n".join(lines)


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise AssertionError(f"unexpected TOML value {value!r}")


def free_port() -> int:
    """A port of 127.0.0.1 where nothing listens (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
