//! `ServingConfig`: the serving scheduler's block pool and the limits of one step.

use std::hash::{Hash, Hasher};

use chunked_prefill::serving::ServingConfig;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyTuple};

use crate::convert::{core_err, reduce_new, slow_check, to_bool, to_usize, usize_or, Arg, Reduced};

/// The constructor's keywords, in signature order (also `to_dict`'s keys).
const FIELDS: [&str; 8] = [
    "num_blocks",
    "block_size",
    "token_budget",
    "chunk_size",
    "max_prefills_per_step",
    "max_running",
    "watermark",
    "prefix_caching",
];

/// The `TypeError` of a keyword that `owner` does not take, worded like Python's own.
pub(crate) fn unexpected_keyword(owner: &str, name: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "{owner}() got an unexpected keyword argument '{name}'"
    ))
}

/// `obj` as a watermark: a `float` as is, anything else through the shared check (an `int`
/// becomes a float; a `bool` or another type is the `TypeError` `not_number`).
fn to_watermark(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    if obj.is_exact_instance_of::<PyFloat>() {
        return obj.extract();
    }
    slow_check("as_number", "watermark", obj)?.extract()
}

/// How the serving scheduler sizes its KV-cache pool and fills each step.
///
/// ``num_blocks``: KV-cache blocks in the pool. ``block_size``: tokens per block.
/// ``token_budget``: the most tokens one step computes (vLLM's ``max_num_batched_tokens``).
/// ``chunk_size``: the most prompt tokens one request gets in one step.
/// ``max_prefills_per_step``: the most prefill chunks in one step.
/// ``max_running``: the most requests holding blocks at once (vLLM's ``max_num_seqs``).
/// ``watermark``: the fraction of the pool admission keeps free for running requests.
/// ``prefix_caching``: whether full computed blocks are reused by later prompts.
#[pyclass(
    name = "ServingConfig",
    module = "chunked_prefill._core",
    frozen,
    eq,
    hash
)]
#[derive(Clone, PartialEq)]
pub(crate) struct PyServingConfig {
    pub(crate) inner: ServingConfig,
}

impl Eq for PyServingConfig {}

impl Hash for PyServingConfig {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let c = &self.inner;
        (c.num_blocks, c.block_size, c.token_budget, c.chunk_size).hash(state);
        (c.max_prefills_per_step, c.max_running, c.prefix_caching).hash(state);
        // `-0.0 == 0.0`, so both hash as `0.0`; a valid watermark is never NaN.
        let watermark = if c.watermark == 0.0 { 0.0 } else { c.watermark };
        watermark.to_bits().hash(state);
    }
}

impl PyServingConfig {
    /// The repr, with the watermark as Python prints a float.
    pub(crate) fn repr(&self, py: Python<'_>) -> PyResult<String> {
        let c = &self.inner;
        let watermark = PyFloat::new(py, c.watermark).repr()?;
        // Converted here, not by `Display` (which swallows an exception, e.g. a signal
        // handler's, and prints "<unprintable str object>").
        let watermark = watermark.to_cow()?;
        Ok(format!(
            "ServingConfig(num_blocks={}, block_size={}, token_budget={}, chunk_size={}, \
             max_prefills_per_step={}, max_running={}, watermark={watermark}, \
             prefix_caching={})",
            c.num_blocks,
            c.block_size,
            c.token_budget,
            c.chunk_size,
            c.max_prefills_per_step,
            c.max_running,
            if c.prefix_caching { "True" } else { "False" },
        ))
    }

    /// The config of `fields`, a dict of checked plain values (`to_dict()`'s form).
    pub(crate) fn from_fields(fields: &Bound<'_, PyDict>) -> PyResult<ServingConfig> {
        let get = |name: &str| -> PyResult<Bound<'_, PyAny>> {
            fields
                .get_item(name)?
                .ok_or_else(|| PyTypeError::new_err(format!("missing config field {name}")))
        };
        Ok(ServingConfig {
            num_blocks: get("num_blocks")?.extract()?,
            block_size: get("block_size")?.extract()?,
            token_budget: get("token_budget")?.extract()?,
            chunk_size: get("chunk_size")?.extract()?,
            max_prefills_per_step: get("max_prefills_per_step")?.extract()?,
            max_running: get("max_running")?.extract()?,
            watermark: get("watermark")?.extract()?,
            prefix_caching: get("prefix_caching")?.extract()?,
        })
    }

    /// The fields as a dict of plain values, in signature order.
    pub(crate) fn fields<'py>(
        config: &ServingConfig,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        dict.set_item("num_blocks", config.num_blocks)?;
        dict.set_item("block_size", config.block_size)?;
        dict.set_item("token_budget", config.token_budget)?;
        dict.set_item("chunk_size", config.chunk_size)?;
        dict.set_item("max_prefills_per_step", config.max_prefills_per_step)?;
        dict.set_item("max_running", config.max_running)?;
        dict.set_item("watermark", config.watermark)?;
        dict.set_item("prefix_caching", config.prefix_caching)?;
        Ok(dict)
    }
}

#[pymethods]
impl PyServingConfig {
    #[new]
    #[pyo3(signature = (
        *,
        num_blocks = Arg(None),
        block_size = Arg(None),
        token_budget = Arg(None),
        chunk_size = Arg(None),
        max_prefills_per_step = Arg(None),
        max_running = Arg(None),
        watermark = Arg(None),
        prefix_caching = Arg(None),
        **unexpected,
    ), text_signature = "(*, num_blocks, block_size=16, token_budget=2048, chunk_size=512, \
        max_prefills_per_step=4, max_running=256, watermark=0.0, prefix_caching=True)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        num_blocks: Arg<'_>,
        block_size: Arg<'_>,
        token_budget: Arg<'_>,
        chunk_size: Arg<'_>,
        max_prefills_per_step: Arg<'_>,
        max_running: Arg<'_>,
        watermark: Arg<'_>,
        prefix_caching: Arg<'_>,
        unexpected: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        // Python's order: a missing argument is refused before the body sees the others.
        let Some(num_blocks) = &num_blocks.0 else {
            return Err(PyTypeError::new_err(
                "ServingConfig.__new__() missing 1 required keyword-only argument: 'num_blocks'",
            ));
        };
        if let Some((name, _)) = unexpected.and_then(|extra| extra.iter().next()) {
            return Err(unexpected_keyword("ServingConfig", &name));
        }
        let d = ServingConfig::new(to_usize("num_blocks", num_blocks)?);
        let inner = ServingConfig {
            num_blocks: d.num_blocks,
            block_size: usize_or(&block_size, "block_size", d.block_size)?,
            token_budget: usize_or(&token_budget, "token_budget", d.token_budget)?,
            chunk_size: usize_or(&chunk_size, "chunk_size", d.chunk_size)?,
            max_prefills_per_step: usize_or(
                &max_prefills_per_step,
                "max_prefills_per_step",
                d.max_prefills_per_step,
            )?,
            max_running: usize_or(&max_running, "max_running", d.max_running)?,
            watermark: watermark.0.as_ref().map_or(Ok(d.watermark), to_watermark)?,
            prefix_caching: match &prefix_caching.0 {
                None => d.prefix_caching,
                Some(obj) => to_bool("prefix_caching", obj)?,
            },
        };
        inner.validate().map_err(core_err)?;
        Ok(Self { inner })
    }

    /// KV-cache blocks in the pool (block ids ``0..num_blocks``).
    #[getter]
    fn num_blocks(&self) -> usize {
        self.inner.num_blocks
    }

    /// Tokens per KV-cache block.
    #[getter]
    fn block_size(&self) -> usize {
        self.inner.block_size
    }

    /// The most tokens one step computes, decodes and prefill chunks together.
    #[getter]
    fn token_budget(&self) -> usize {
        self.inner.token_budget
    }

    /// The most prompt (or recompute) tokens one request gets in one step.
    #[getter]
    fn chunk_size(&self) -> usize {
        self.inner.chunk_size
    }

    /// The most prefill chunks in one step.
    #[getter]
    fn max_prefills_per_step(&self) -> usize {
        self.inner.max_prefills_per_step
    }

    /// The most requests holding blocks at once.
    #[getter]
    fn max_running(&self) -> usize {
        self.inner.max_running
    }

    /// The fraction of the pool admission keeps free for running requests to grow into.
    #[getter]
    fn watermark(&self) -> f64 {
        self.inner.watermark
    }

    /// Whether full computed blocks are hashed and reused by later prompts.
    #[getter]
    fn prefix_caching(&self) -> bool {
        self.inner.prefix_caching
    }

    /// A copy with ``changes`` applied, validated like the constructor.
    #[pyo3(signature = (**changes))]
    fn replace<'py>(
        slf: &Bound<'py, Self>,
        changes: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let fields = Self::fields(&slf.get().inner, py)?;
        if let Some(changes) = changes {
            for (key, value) in changes.iter() {
                let known = key
                    .extract::<String>()
                    .is_ok_and(|name| FIELDS.contains(&name.as_str()));
                if !known {
                    return Err(unexpected_keyword("ServingConfig.replace", &key));
                }
                fields.set_item(key, value)?;
            }
        }
        py.get_type::<Self>().call((), Some(&fields))
    }

    /// The fields as a dict of plain values (the constructor's keywords, in order).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        Self::fields(&self.inner, py)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let py = slf.py();
        let fields = Self::fields(&slf.get().inner, py)?;
        reduce_new(slf.get_type(), PyTuple::empty(py), fields)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.repr(py)
    }
}
