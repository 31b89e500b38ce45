"""A checkpoint's quantization (``quantization_config``) as the dtype of its linear weights:
FP8 (``fp8``, ``fbgemm_fp8``, compressed-tensors' 8-bit floats) or weight-only integers
(GPTQ, AWQ, compressed-tensors' W4A16/W8A16: ``int4``, ``int8``); anything else refused."""

from __future__ import annotations

from typing import Any

from ..._json import Number, exact, whole
from ..errors import ModelConfigError
from ..names import _kind

FP8_QUANT_METHODS = ("fp8", "fbgemm_fp8", "compressed-tensors")
"""``quantization_config.quant_method`` values read as FP8 weights (compressed-tensors when
every config group's weights are 8-bit floats)."""

INT_QUANT_METHODS = ("gptq", "awq", "gptq_marlin", "awq_marlin")
"""``quant_method`` values read as weight-only integers of ``bits`` 4 or 8 (vLLM runs them
with its Marlin kernels on Ampere and later)."""

_INT_DTYPES = {4: "int4", 8: "int8"}


def _number(value: Any) -> int | None:
    """A JSON number's exact whole value, else ``None``."""
    parsed = exact(value) if isinstance(value, Number) else None
    return whole(*parsed) if parsed is not None else None


def _group_dtype(path: str, name: str, group: Any) -> str:
    """One compressed-tensors config group's weight dtype: ``fp8`` for 8-bit floats,
    ``int4``/``int8`` for integers with 16-bit activations (no ``input_activations``)."""
    key = f"quantization_config.config_groups.{name}.weights"
    weights = group.get("weights") if isinstance(group, dict) else None
    kind = weights.get("type") if isinstance(weights, dict) else None
    bits = _number(weights.get("num_bits")) if isinstance(weights, dict) else None
    if kind == "float" and bits == 8:
        return "fp8"
    if kind == "int" and bits in _INT_DTYPES and group.get("input_activations") is None:
        return _INT_DTYPES[bits]
    got = (
        f"type {_kind(kind)}, num_bits {_kind(weights.get('num_bits'))}"
        if isinstance(weights, dict)
        else _kind(weights)
    )
    if kind == "int" and bits in _INT_DTYPES:
        got += " with quantized activations"
    raise ModelConfigError(
        f"{path}: key {key!r}: {got} is not modelled (only 8-bit float weights,"
        ' {"type": "float", "num_bits": 8}, and 4- or 8-bit integer weights with 16-bit'
        " activations are: other quantized weights would be counted at the wrong size)"
    )


def _compressed_tensors(path: str, quant: dict[str, Any]) -> str:
    """The one weight dtype of every config group of a compressed-tensors config, naming
    the first group that is not modelled or differs."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ModelConfigError(
            f"{path}: key 'quantization_config.config_groups': expected a non-empty object,"
            f" got {_kind(groups)}"
        )
    dtypes = {name: _group_dtype(path, name, group) for name, group in groups.items()}
    first = next(iter(dtypes.values()))
    for name, dtype in dtypes.items():
        if dtype != first:
            raise ModelConfigError(
                f"{path}: key 'quantization_config.config_groups.{name}.weights': {dtype}"
                f" beside {first} in another group is not modelled (one weight dtype only)"
            )
    return first


def _int_bits(path: str, quant: dict[str, Any], method: str) -> str:
    bits = quant.get("bits")
    dtype = _INT_DTYPES.get(_number(bits) or 0)
    if dtype is None:
        raise ModelConfigError(
            f"{path}: key 'quantization_config.bits': {method} with {_kind(bits)} bits is not"
            " modelled (only 4 or 8)"
        )
    return dtype


def _weight_dtype(path: str, table: dict[str, Any], dtype: str) -> str:
    """The linear weights' dtype: ``dtype`` without a ``quantization_config``, ``"fp8"``
    for an FP8 checkpoint, ``"int4"``/``"int8"`` for a weight-only integer one. Any other
    quantization is refused: its weights are not these sizes."""
    quant = table.get("quantization_config")
    if quant is None:
        return dtype
    if not isinstance(quant, dict):
        raise ModelConfigError(
            f"{path}: key 'quantization_config': expected an object, got {_kind(quant)}"
        )
    method = quant.get("quant_method")
    if method is None:
        raise ModelConfigError(f"{path}: key 'quantization_config.quant_method': missing")
    if not isinstance(method, str) or isinstance(method, Number):
        raise ModelConfigError(
            f"{path}: key 'quantization_config.quant_method': expected a string, got"
            f" {_kind(method)}"
        )
    if method in INT_QUANT_METHODS:
        return _int_bits(path, quant, method)
    if method not in FP8_QUANT_METHODS:
        known = ", ".join(FP8_QUANT_METHODS + INT_QUANT_METHODS)
        raise ModelConfigError(
            f"{path}: key 'quantization_config.quant_method': {method!r} is not modelled"
            f" (only FP8 and weight-only integer weights: {known}; other quantized weights"
            " would be counted at the wrong size)"
        )
    return _compressed_tensors(path, quant) if method == "compressed-tensors" else "fp8"
