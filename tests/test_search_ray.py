"""The capacity search on Ray gives the local result: on a new local Ray instance
(``--ray`` without an address) and on a two-node cluster (head and one worker node) started
here, everything bound to the loopback interface.

Skipped, with the reason, only where Ray is not installed or cannot start.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

# Ray replaces a loopback address by the machine's outward address when it connects
# (``resolve_ip_for_localhost``) unless it is told this machine runs no cluster of
# several hosts: then every address it uses or gives out stays 127.0.0.1. Read when ray is
# imported, so set first.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

ray = pytest.importorskip("ray", reason="Ray is not installed (the ray extra)")

from chunked_prefill.cli import main  # noqa: E402
from chunked_prefill.sim import SyntheticWorkload, expand_serving_configs, search  # noqa: E402

GRID = ["--requests", "150", "--chunk-size", "256,512,none", "--slo-ttft", "2", "--slo-tbt", "0.1"]
LOOPBACK = "127.0.0.1"


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    code = main(["search", *GRID, "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    data: list[dict[str, Any]] = json.loads(out)
    return data


@pytest.fixture(scope="module")
def local() -> list[dict[str, Any]]:
    return search(
        SyntheticWorkload(150),
        expand_serving_configs([256, 512, None]),
        slo_ttft_s=2.0,
        slo_tbt_s=0.1,
        workers=1,
    )


def test_local_ray_instance_gives_the_local_result(local: list[dict[str, Any]]) -> None:
    assert not ray.is_initialized()
    try:
        items = search(
            SyntheticWorkload(150),
            expand_serving_configs([256, 512, None]),
            slo_ttft_s=2.0,
            slo_tbt_s=0.1,
            workers=2,
            ray=True,
        )
    except (ConnectionError, RuntimeError) as err:  # pragma: no cover - environment
        pytest.skip(f"a local Ray instance cannot start here: {err}")
    assert items == local
    assert not ray.is_initialized()  # the instance it started is shut down


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    node = {"node_ip_address": LOOPBACK, "num_cpus": 1, "include_dashboard": False}
    try:
        c = Cluster(initialize_head=True, head_node_args=dict(node))
        c.add_node(node_ip_address=LOOPBACK, num_cpus=1)
    except Exception as err:  # pragma: no cover - environment
        pytest.skip(f"a local Ray cluster cannot start here: {err}")
    try:
        assert c.address.startswith(LOOPBACK + ":"), c.address
        yield c
    finally:
        c.shutdown()


def test_cluster_gives_the_local_result(
    cluster: Any, local: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    items = _cli_json(capsys, "--ray", cluster.address)
    assert items == json.loads(json.dumps(local))
    assert not ray.is_initialized()


def test_cluster_runs_probes_on_both_nodes(cluster: Any) -> None:
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        nodes = {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
        assert nodes == {LOOPBACK} and len([n for n in ray.nodes() if n["Alive"]]) == 2
        # A driver already connected keeps its connection: search() uses it.
        items = search(SyntheticWorkload(60), slo_ttft_s=2.0, ray=True, precision=0.2)
        assert ray.is_initialized() and items[0]["capacity_rps"] > 0
    finally:
        ray.shutdown()
