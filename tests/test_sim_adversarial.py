"""Adversarial arguments of the simulator's Python API and odd input files (issue 21).

Every bad argument is refused before any work with a ``ValueError`` (a number of the wrong
kind or out of range) or a ``TypeError`` (the wrong kind of object) naming it; the same on
both loops. Input files are read only when regular, and never whole when they hold a NUL.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunked_prefill.sim import (
    ChatWorkloadSpec,
    EngineModel,
    EngineSpec,
    ProfileError,
    ServingSimConfig,
    SyntheticWorkload,
    TraceError,
    default_workload,
    expand_configs,
    expand_serving_configs,
    load_profile,
    load_trace,
    search,
    simulate,
    simulate_serving,
)
from chunked_prefill.sim.catalog import ModelConfigError, engine_for
from chunked_prefill.sim.fit import read_steps_csv
from chunked_prefill.sim.serving import memory_of

WL = default_workload(5, seed=1)

Call = Callable[[], Any]

CASES: list[tuple[str, Call, type[Exception], str]] = [
    (
        "spec",
        lambda: default_workload(5, spec=1),  # type: ignore[arg-type]
        TypeError,
        "spec must be None or a ChatWorkloadSpec, got 1",
    ),
    (
        "rate",
        lambda: default_workload(5, rate=None),  # type: ignore[arg-type]
        ValueError,
        "rate must be a number in (0, inf], got None",
    ),
    (
        "seed",
        lambda: default_workload(5, seed=-1),
        ValueError,
        "seed must be an int in [0, 18446744073709551615], got -1",
    ),
    (
        "requests",
        lambda: default_workload(2**70),
        ValueError,
        "requests must be an int in [1, 10000000], got 1180591620717411303424",
    ),
    (
        "prompt_scale",
        lambda: default_workload(5, prompt_scale="2"),  # type: ignore[arg-type]
        ValueError,
        "prompt_scale must be a number in (0, inf), got '2'",
    ),
    (
        "chat_prompt_median",
        lambda: ChatWorkloadSpec(chat_prompt_median=math.nan),
        ValueError,
        "chat_prompt_median must be a number in (0, 9.0072e+15], got nan",
    ),
    (
        "long_fraction",
        lambda: ChatWorkloadSpec(long_fraction=True),
        ValueError,
        "long_fraction must be a number in [0, 1], got True",
    ),
    (
        "serving chunk_size",
        lambda: ServingSimConfig(chunk_size=0),
        ValueError,
        "chunk_size must be an int in [1, 18446744073709551615] or None, got 0",
    ),
    (
        "watermark",
        lambda: ServingSimConfig(watermark=1.0),
        ValueError,
        "watermark must be a number in [0, 1), got 1.0",
    ),
    (
        "prefix_caching",
        lambda: ServingSimConfig(prefix_caching=1),  # type: ignore[arg-type]
        TypeError,
        "prefix_caching must be True or False, got 1",
    ),
    (
        "synthetic turns",
        lambda: SyntheticWorkload(turns=0),
        ValueError,
        "turns must be an int in [1, 9223372036854775807], got 0",
    ),
    (
        "engine name",
        lambda: EngineModel(name=None),  # type: ignore[arg-type]
        TypeError,
        "engine name must be a string, got None",
    ),
    (
        "EngineSpec model",
        lambda: EngineSpec(None, memory_of("llama2-7b-a100")),  # type: ignore[arg-type]
        TypeError,
        "model must be an EngineModel or a RooflineModel, got None",
    ),
    (
        "chunk_sizes",
        lambda: expand_configs(chunk_sizes=512),  # type: ignore[arg-type]
        TypeError,
        "chunk_sizes must be an iterable of ints or None, got 512",
    ),
    (
        "watermarks",
        lambda: expand_serving_configs(watermarks="0.1"),  # type: ignore[arg-type]
        TypeError,
        "watermarks must be an iterable of numbers, got '0.1'",
    ),
    (
        "block_sizes",
        lambda: expand_serving_configs(block_sizes=[]),
        ValueError,
        "block_sizes must hold at least one value, got none",
    ),
    (
        "head",
        lambda: WL.head(None),  # type: ignore[arg-type]
        ValueError,
        "n must be an int in [0, 18446744073709551615], got None",
    ),
    (
        "at_rate",
        lambda: WL.at_rate(math.nan),
        ValueError,
        "rate must be a number in (0, inf], got nan",
    ),
    (
        "load_trace path",
        lambda: load_trace(None),  # type: ignore[arg-type]
        TypeError,
        "path must be a file path (a non-empty str or os.PathLike), got None",
    ),
    (
        "load_trace format",
        lambda: load_trace("missing.csv", format="tsv"),
        ValueError,
        "format must be None, 'csv' or 'jsonl', got 'tsv'",
    ),
    (
        "load_profile base",
        lambda: load_profile("examples/a100-40gb.toml", base=None),  # type: ignore[arg-type]
        TypeError,
        "base must be an EngineModel, got None",
    ),
    (
        "engine_for model",
        lambda: engine_for(None, "h100-sxm"),  # type: ignore[arg-type]
        TypeError,
        "model must be a preset name, a config.json path or a ModelSpec, got None",
    ),
    (
        "engine_for utilization",
        lambda: engine_for("llama-3.1-8b", "h100-sxm", gpu_memory_utilization="x"),  # type: ignore[arg-type]
        ValueError,
        "gpu_memory_utilization must be a number in (0, 1], got 'x'",
    ),
    (
        "engine_for tp",
        lambda: engine_for("llama-3.1-8b", "h100-sxm", 2**70),
        ValueError,
        "tp must be a whole number of GPUs in [1, 1024], got 1180591620717411303424",
    ),
]


@pytest.mark.parametrize(("name", "call", "kind", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_argument_is_named(name: str, call: Call, kind: type[Exception], message: str) -> None:
    with pytest.raises(kind) as info:
        call()
    assert str(info.value) == message


LOOP_CASES: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("engine", {"engine": None}, TypeError, "engine must be an EngineModel or a RooflineModel"),
    ("configs", {"configs": "x"}, TypeError, "configs must be an iterable of "),
    ("configs item", {"configs": [None]}, TypeError, "configs[0] must be a "),
    ("stall", {"stall_threshold_s": math.inf}, ValueError, "stall_threshold_s must be a number"),
    ("max_steps", {"max_steps": True}, ValueError, "max_steps must be an int in [1, "),
]


@pytest.mark.parametrize("loop", ["rust", "pure"])
@pytest.mark.parametrize(
    ("name", "kwargs", "kind", "start"), LOOP_CASES, ids=[c[0] for c in LOOP_CASES]
)
def test_simulate_arguments_on_both_loops(
    loop: str, name: str, kwargs: dict[str, Any], kind: type[Exception], start: str
) -> None:
    for run in (simulate, simulate_serving):
        with pytest.raises(kind) as info:
            run(WL, backend=loop, **kwargs)
        assert str(info.value).startswith(start), str(info.value)


@pytest.mark.parametrize("loop", ["rust", "pure"])
def test_serving_arguments_on_both_loops(loop: str) -> None:
    bad: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"memory": 3}, TypeError, "memory must be None or a KVMemory, got 3"),
        ({"num_blocks": -1}, ValueError, "num_blocks must be an int in [1, 18446744073709551615]"),
        ({"slo_ttft_s": math.nan}, ValueError, "slo_ttft_s must be a number in (0, inf) or None"),
        ({"gpu_memory_utilization": 0}, ValueError, "gpu_memory_utilization must be a number"),
        ({"workload": [1]}, TypeError, "workload must be a Workload, got [1]"),
    ]
    for kwargs, kind, start in bad:
        args = {"workload": WL, **kwargs}
        with pytest.raises(kind) as info:
            simulate_serving(backend=loop, **args)
        assert str(info.value).startswith(start), str(info.value)


def test_simulate_callbacks_and_flags() -> None:
    with pytest.raises(TypeError, match=r"^on_progress must be None or a callable, got 1$"):
        simulate(WL, on_progress=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^record_steps must be True or False, got None$"):
        simulate(WL, record_steps=None)  # type: ignore[arg-type]


def test_numpy_scalars_are_numbers() -> None:
    cfg = ServingSimConfig(chunk_size=np.int64(256), watermark=np.float64(0.1))  # type: ignore[arg-type]
    assert cfg.chunk_size == 256 and type(cfg.chunk_size) is int
    (result,) = simulate_serving(WL, cfg, replicas=np.int64(1))  # type: ignore[arg-type]
    assert result.requests == 5


# --------------------------------------------------------------------------- files


def _trace_error(path: str, message: str) -> None:
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert str(info.value) == message


def test_trace_that_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "t.csv"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer
    _trace_error(
        str(fifo), f"{fifo}: cannot be read: it is a FIFO (named pipe), not a regular file"
    )
    _trace_error(
        "/dev/zero", "/dev/zero: cannot be read: it is a character device, not a regular file"
    )
    _trace_error(
        str(tmp_path), f"{tmp_path}: cannot be read: it is a directory, not a regular file"
    )
    _trace_error("-", "-: cannot be read: '-' is not standard input here; save the input to a file")


def test_trace_with_nul_or_binary_is_refused_at_its_line(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse.csv"
    with open(sparse, "wb") as fh:
        fh.truncate(2 << 30)  # a 2 GiB hole: refused at its first chunk, not read whole
    _trace_error(str(sparse), f"{sparse}:1: holds a NUL byte: a binary file, not text")
    nul = tmp_path / "nul.csv"
    nul.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0,5\x00,5\n")
    _trace_error(str(nul), f"{nul}:2: holds a NUL byte: a binary file, not text")
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0,5,5\n\xe90,5,5\n")
    _trace_error(str(latin), f"{latin}:3: not UTF-8 text: invalid continuation byte at byte 44")


def test_trace_json_nested_too_deeply(tmp_path: Path) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "\n")
    _trace_error(str(deep), f"{deep}:1: is not valid JSON: nested too deeply (column 1)")
    hashes = tmp_path / "hashes.csv"
    hashes.write_text(
        'arrival_s,prompt_tokens,output_tokens,hash_ids\n0,5,5,"' + "[" * 100_000 + '"\n'
    )
    with pytest.raises(TraceError, match=r":2: field 'hash_ids': not a JSON array: "):
        load_trace(hashes)


def test_steps_file_that_is_not_a_regular_file() -> None:
    with pytest.raises(TraceError) as info:
        read_steps_csv("/dev/zero")
    assert str(info.value) == (
        "/dev/zero: cannot be read: it is a character device, not a regular file"
    )


def test_profiles_odd_files(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    with pytest.raises(ProfileError, match=r"deep.json: not valid JSON: nested too deeply"):
        load_profile(deep)
    toml = tmp_path / "deep.toml"
    toml.write_text("a = " + "[" * 100_000)
    with pytest.raises(ProfileError, match=r"deep.toml: not valid TOML: nested too deeply$"):
        load_profile(toml)
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(2 << 30)
    with pytest.raises(ModelConfigError) as info:
        engine_for(str(big), "h100-sxm")
    assert str(info.value) == (
        f"{big}: is 2147483648 bytes, above the limit of 16777216 bytes for this file"
    )
    with pytest.raises(ModelConfigError, match=r": it is a character device, not a regular"):
        engine_for("llama-3.1-8b", "/dev/zero")


# --------------------------------------------------------------------------- closed pipe


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--requests", "20"],
        ["simulate", "--requests", "20", "--json"],
        [
            "search",
            "--requests",
            "30",
            "--slo-ttft",
            "2",
            "--chunk-size",
            "256",
            "--workers",
            "1",
            "--json",
        ],
        ["engines"],
    ],
    ids=["simulate", "simulate-json", "search-json", "engines"],
)
def test_output_to_a_closed_pipe_exits_0_silently(argv: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    # The package as this interpreter imports it (CI installs the wheel: the source tree
    # has no compiled core).
    proc = subprocess.run(
        [sys.executable, "-m", "chunked_prefill", *argv],
        stdout=write,
        stderr=subprocess.PIPE,
        timeout=120,
        check=False,
    )
    os.close(write)
    assert (proc.returncode, proc.stderr) == (0, b"")


SEARCH_CASES: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"ray": 1}, TypeError, "ray must be True or False, got 1"),
    ({"ray_address": "x"}, ValueError, "ray_address='x' needs ray=True"),
    ({"keep_runs": None}, TypeError, "keep_runs must be True or False, got None"),
    ({"on_probe": 1}, TypeError, "on_probe must be None or a callable, got 1"),
    (
        {"engines": "llama2-7b-a100"},
        TypeError,
        "engines must be an iterable of engine presets, EngineModels or EngineSpecs,"
        " got 'llama2-7b-a100'",
    ),
    (
        {"routers": "round-robin"},
        TypeError,
        "routers must be an iterable of router names, got 'round-robin'",
    ),
    ({"backend": None}, ValueError, "backend must be 'rust' or 'pure', got None"),
    ({"max_steps": 0}, ValueError, "max_steps must be an int in [1, 18446744073709551615], got 0"),
    (
        {"stall_threshold_s": -1},
        ValueError,
        "stall_threshold_s must be a number in [0, inf), got -1",
    ),
    ({"attainment": None}, ValueError, "attainment must be a fraction in (0, 1], got None"),
    ({"gpu_cost": True}, ValueError, "gpu_cost must be a number in (0, inf) or None, got True"),
]


@pytest.mark.parametrize(("kwargs", "kind", "message"), SEARCH_CASES)
def test_search_arguments_refused_before_any_probe(
    kwargs: dict[str, Any], kind: type[Exception], message: str
) -> None:
    probes: list[int] = []
    args: dict[str, Any] = {
        "slo_ttft_s": 1.0,
        "workers": 1,
        "on_probe": lambda d, t: probes.append(d),
    }
    with pytest.raises(kind) as info:
        search(SyntheticWorkload(requests=3), **{**args, **kwargs})
    assert (str(info.value), probes) == (message, [])


def test_search_with_ray_missing_is_an_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(ImportError) as info:
        search(SyntheticWorkload(requests=3), slo_ttft_s=1.0, ray=True)
    assert str(info.value) == (
        "ray=True needs Ray; install the ray extra: pip install 'chunked-prefill[ray]'"
        " (or pip install ray)"
    )
