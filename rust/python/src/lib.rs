//! PyO3 bindings of the `chunked-prefill` core: a thin translation of types and errors.
//!
//! Every rule lives in the core; this crate converts Python values to Rust ones (the slow
//! path of an unusual argument goes through `chunked_prefill._validate`, so both backends
//! raise the same message), maps each core error to one Python exception class in
//! [`core_err`], and never holds the scheduler's lock while running Python code.

use std::sync::{Mutex, MutexGuard};

use chunked_prefill::{
    Chunk, ChunkedPrefillConfig, ChunkedPrefillScheduler, ChunkedStep, CoreError, Counters,
    PrefillChunkState,
};
use pyo3::exceptions::{PyKeyError, PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyTuple, PyType};

/// The one mapping of core errors to Python exceptions: an unknown id is a `KeyError`,
/// every other rejected input a `ValueError`; the message is the core's (the table's).
fn core_err(err: CoreError) -> PyErr {
    match err {
        CoreError::UnknownRequest { .. } => PyKeyError::new_err(err.to_string()),
        _ => PyValueError::new_err(err.to_string()),
    }
}

/// An argument as given, or absent (so an explicit `None` is still checked, not defaulted).
struct Arg<'py>(Option<Bound<'py, PyAny>>);

impl<'a, 'py> FromPyObject<'a, 'py> for Arg<'py> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Arg(Some(obj.to_owned())))
    }
}

/// Run the shared Python check `func` on an argument that missed the fast path: it raises
/// the table's error, or returns the value as a plain `int` (e.g. for a numpy integer).
fn slow_check<'py>(func: &str, name: &str, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    obj.py()
        .import("chunked_prefill._validate")?
        .getattr(func)?
        .call1((name, obj))
}

fn to_u64(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if obj.is_exact_instance_of::<PyInt>() {
        if let Ok(value) = obj.extract::<u64>() {
            return Ok(value);
        }
    }
    slow_check("as_u64", name, obj)?.extract()
}

fn to_usize(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    let value = to_u64(name, obj)?;
    usize::try_from(value).map_err(|_| {
        PyOverflowError::new_err(format!(
            "{name} must be at most {}, got {value}",
            usize::MAX
        ))
    })
}

fn to_i64(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    if obj.is_exact_instance_of::<PyInt>() {
        if let Ok(value) = obj.extract::<i64>() {
            return Ok(value);
        }
    }
    slow_check("as_i64", name, obj)?.extract()
}

fn to_u128(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<u128> {
    slow_check("as_u128", name, obj)?.extract()
}

fn to_bool(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    match obj.cast::<PyBool>() {
        Ok(flag) => Ok(flag.is_true()),
        Err(_) => slow_check("as_bool", name, obj)?.extract(),
    }
}

fn i64_or(arg: &Arg<'_>, name: &str, default: i64) -> PyResult<i64> {
    arg.0.as_ref().map_or(Ok(default), |obj| to_i64(name, obj))
}

fn usize_or(arg: &Arg<'_>, name: &str, default: usize) -> PyResult<usize> {
    arg.0
        .as_ref()
        .map_or(Ok(default), |obj| to_usize(name, obj))
}

/// What `__reduce__` returns: the rebuilding callable and its arguments, as a tuple.
type Reduced<'py> = PyResult<Bound<'py, PyAny>>;

/// A `__reduce__` value that rebuilds an instance of `cls` as `cls.__new__(cls, *args,
/// **kwargs)` with any pickle protocol (protocols 2 and up turn it into their `NEWOBJ` form).
fn reduce_new<'py>(
    cls: Bound<'py, PyType>,
    args: Bound<'py, PyTuple>,
    kwargs: Bound<'py, PyDict>,
) -> Reduced<'py> {
    let py = cls.py();
    let newobj = py.import("copyreg")?.getattr("__newobj_ex__")?;
    Ok((newobj, (cls, args, kwargs)).into_pyobject(py)?.into_any())
}

/// A counter as a Python int: the common case (it fits 64 bits) without the 128-bit path.
fn counter(py: Python<'_>, value: u128) -> PyResult<Bound<'_, PyAny>> {
    Ok(match u64::try_from(value) {
        Ok(small) => small.into_pyobject(py)?.into_any(),
        Err(_) => value.into_pyobject(py)?.into_any(),
    })
}

/// How the scheduler splits prompts and fills each step.
///
/// ``chunk_size``: the most prompt tokens one request receives in one step.
/// ``max_decode_tokens``: the most decode tokens one step runs.
/// ``interleave_decode``: whether steps carry decode tokens at all.
/// ``token_budget``: the most tokens (decode + prefill) one step carries; ``None`` keeps
/// the original rule (one chunk per step, decodes counted beside it).
/// ``max_prefills_per_step``: how many requests may receive a chunk in one step.
#[pyclass(name = "Config", module = "chunked_prefill._core", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
struct PyConfig {
    inner: ChunkedPrefillConfig,
}

#[pymethods]
impl PyConfig {
    #[new]
    #[pyo3(signature = (
        *,
        chunk_size = Arg(None),
        max_decode_tokens = Arg(None),
        interleave_decode = Arg(None),
        token_budget = Arg(None),
        max_prefills_per_step = Arg(None),
    ), text_signature = "(*, chunk_size=512, max_decode_tokens=128, interleave_decode=True, \
        token_budget=None, max_prefills_per_step=1)")]
    fn new(
        chunk_size: Arg<'_>,
        max_decode_tokens: Arg<'_>,
        interleave_decode: Arg<'_>,
        token_budget: Arg<'_>,
        max_prefills_per_step: Arg<'_>,
    ) -> PyResult<Self> {
        let defaults = ChunkedPrefillConfig::default();
        let inner = ChunkedPrefillConfig {
            chunk_size: usize_or(&chunk_size, "chunk_size", defaults.chunk_size)?,
            max_decode_tokens: usize_or(
                &max_decode_tokens,
                "max_decode_tokens",
                defaults.max_decode_tokens,
            )?,
            interleave_decode: match &interleave_decode.0 {
                None => defaults.interleave_decode,
                Some(obj) => to_bool("interleave_decode", obj)?,
            },
            token_budget: match &token_budget.0 {
                Some(obj) if !obj.is_none() => Some(to_usize("token_budget", obj)?),
                _ => None,
            },
            max_prefills_per_step: usize_or(
                &max_prefills_per_step,
                "max_prefills_per_step",
                defaults.max_prefills_per_step,
            )?,
        };
        inner.validate().map_err(core_err)?;
        Ok(Self { inner })
    }

    /// The most prompt tokens one request receives in one step.
    #[getter]
    fn chunk_size(&self) -> usize {
        self.inner.chunk_size
    }

    /// The most decode tokens one step runs.
    #[getter]
    fn max_decode_tokens(&self) -> usize {
        self.inner.max_decode_tokens
    }

    /// Whether steps carry decode tokens; when false every step has 0.
    #[getter]
    fn interleave_decode(&self) -> bool {
        self.inner.interleave_decode
    }

    /// The most tokens one step carries, or ``None`` for the original one-chunk rule.
    #[getter]
    fn token_budget(&self) -> Option<usize> {
        self.inner.token_budget
    }

    /// How many requests may receive a prefill chunk in one step.
    #[getter]
    fn max_prefills_per_step(&self) -> usize {
        self.inner.max_prefills_per_step
    }

    /// A copy with ``changes`` applied, validated like the constructor.
    #[pyo3(signature = (**changes))]
    fn replace<'py>(
        slf: &Bound<'py, Self>,
        changes: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let fields = slf.get().to_dict(py)?;
        if let Some(changes) = changes {
            for (key, value) in changes.iter() {
                let name: String = key.extract()?;
                if !fields.contains(&name)? {
                    return Err(PyTypeError::new_err(format!(
                        "Config.replace() got an unexpected keyword argument '{name}'"
                    )));
                }
                fields.set_item(key, value)?;
            }
        }
        py.get_type::<Self>().call((), Some(&fields))
    }

    /// The fields as a dict of plain values (the constructor's keywords).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.inner;
        let dict = PyDict::new(py);
        dict.set_item("chunk_size", c.chunk_size)?;
        dict.set_item("max_decode_tokens", c.max_decode_tokens)?;
        dict.set_item("interleave_decode", c.interleave_decode)?;
        dict.set_item("token_budget", c.token_budget)?;
        dict.set_item("max_prefills_per_step", c.max_prefills_per_step)?;
        Ok(dict)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let py = slf.py();
        reduce_new(slf.get_type(), PyTuple::empty(py), slf.get().to_dict(py)?)
    }

    fn __repr__(&self) -> String {
        let c = &self.inner;
        let budget = c
            .token_budget
            .map_or_else(|| "None".to_owned(), |b| b.to_string());
        format!(
            "Config(chunk_size={}, max_decode_tokens={}, interleave_decode={}, \
             token_budget={budget}, max_prefills_per_step={})",
            c.chunk_size,
            c.max_decode_tokens,
            if c.interleave_decode { "True" } else { "False" },
            c.max_prefills_per_step
        )
    }
}

fn chunk_repr(c: &Chunk) -> String {
    format!(
        "Chunk(request_id={}, start={}, tokens={}, is_last={})",
        c.request_id,
        c.start,
        c.tokens,
        if c.is_last { "True" } else { "False" }
    )
}

/// One request's share of a step: prompt tokens ``[start, start + tokens)``.
///
/// ``is_last`` is true when the chunk finishes the prompt: the engine samples the
/// request's first output token from this chunk's last position.
#[pyclass(
    name = "Chunk",
    module = "chunked_prefill._core",
    frozen,
    eq,
    ord,
    hash
)]
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct PyChunk {
    inner: Chunk,
}

#[pymethods]
impl PyChunk {
    #[new]
    fn new(
        request_id: &Bound<'_, PyAny>,
        start: &Bound<'_, PyAny>,
        tokens: &Bound<'_, PyAny>,
        is_last: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        Ok(Self {
            inner: Chunk {
                request_id: to_u64("request_id", request_id)?,
                start: to_usize("start", start)?,
                tokens: to_usize("tokens", tokens)?,
                is_last: to_bool("is_last", is_last)?,
            },
        })
    }

    /// The request whose prompt this chunk belongs to.
    #[getter]
    fn request_id(&self) -> u64 {
        self.inner.request_id
    }

    /// Position in the prompt of the chunk's first token.
    #[getter]
    fn start(&self) -> usize {
        self.inner.start
    }

    /// How many prompt tokens the chunk holds.
    #[getter]
    fn tokens(&self) -> usize {
        self.inner.tokens
    }

    /// Whether this chunk completes the request's prompt.
    #[getter]
    fn is_last(&self) -> bool {
        self.inner.is_last
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let c = &slf.get().inner;
        let args = (c.request_id, c.start, c.tokens, c.is_last);
        Ok((slf.get_type(), args).into_pyobject(slf.py())?.into_any())
    }

    fn __repr__(&self) -> String {
        chunk_repr(&self.inner)
    }
}

/// The plan of one engine step: prefill chunks plus a count of decode tokens.
///
/// The engine runs every chunk in ``chunks`` (in order) and ``decode_tokens`` decode
/// tokens, one for each of that many decoding requests. ``prefill_request_id``,
/// ``prefill_start`` and ``is_last_chunk`` describe the first chunk, as the original did.
#[pyclass(name = "Step", module = "chunked_prefill._core", frozen, eq, hash)]
#[derive(PartialEq, Eq, Hash)]
struct PyStep {
    inner: ChunkedStep,
}

#[pymethods]
impl PyStep {
    #[new]
    #[pyo3(
        signature = (*, step_index, decode_tokens, chunks = Arg(None)),
        text_signature = "(*, step_index, decode_tokens, chunks=())"
    )]
    fn new(
        step_index: &Bound<'_, PyAny>,
        decode_tokens: &Bound<'_, PyAny>,
        chunks: Arg<'_>,
    ) -> PyResult<Self> {
        let step_index = to_u128("step_index", step_index)?;
        let decode_tokens = to_usize("decode_tokens", decode_tokens)?;
        let mut items = Vec::new();
        if let Some(chunks) = &chunks.0 {
            for item in chunks.try_iter()? {
                let item = item?;
                match item.cast::<PyChunk>() {
                    Ok(chunk) => items.push(chunk.get().inner),
                    Err(_) => {
                        slow_check("reject_chunk", "chunks", &item)?;
                    }
                }
            }
        }
        let total: u128 = items.iter().map(|c| c.tokens as u128).sum();
        ChunkedStep::from_chunks(step_index, decode_tokens, items)
            .map(|inner| Self { inner })
            .ok_or_else(|| {
                PyOverflowError::new_err(format!(
                    "prefill_tokens must be at most 18446744073709551615, got {total}"
                ))
            })
    }

    /// Zero-based count of ``next_step`` calls before this one.
    #[getter]
    fn step_index<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        counter(py, self.inner.step_index)
    }

    /// How many decode tokens (one per decoding request) the step runs.
    #[getter]
    fn decode_tokens(&self) -> usize {
        self.inner.decode_tokens
    }

    /// Every prefill chunk of the step, in scheduling order.
    #[getter]
    fn chunks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.chunks.iter().map(|c| PyChunk { inner: *c }))
    }

    /// Total prompt tokens of the step (the sum over ``chunks``).
    #[getter]
    fn prefill_tokens(&self) -> usize {
        self.inner.prefill_tokens
    }

    /// The first chunk's request, or ``None`` for a pure decode step.
    #[getter]
    fn prefill_request_id(&self) -> Option<u64> {
        self.inner.prefill_request_id
    }

    /// Prompt position where the first chunk starts (0 without a chunk).
    #[getter]
    fn prefill_start(&self) -> usize {
        self.inner.prefill_start
    }

    /// Whether the first chunk completes its prompt (``False`` without a chunk).
    #[getter]
    fn is_last_chunk(&self) -> bool {
        self.inner.is_last_chunk
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let py = slf.py();
        let step = slf.get();
        let kwargs = PyDict::new(py);
        kwargs.set_item("step_index", counter(py, step.inner.step_index)?)?;
        kwargs.set_item("decode_tokens", step.inner.decode_tokens)?;
        kwargs.set_item("chunks", step.chunks(py)?)?;
        reduce_new(slf.get_type(), PyTuple::empty(py), kwargs)
    }

    fn __repr__(&self) -> String {
        let s = &self.inner;
        let mut chunks: Vec<String> = s.chunks.iter().map(chunk_repr).collect();
        if chunks.len() == 1 {
            chunks[0].push(',');
        }
        format!(
            "Step(step_index={}, decode_tokens={}, prefill_tokens={}, chunks=({}))",
            s.step_index,
            s.decode_tokens,
            s.prefill_tokens,
            chunks.join(", ")
        )
    }
}

fn state_dict<'py>(py: Python<'py>, s: &PrefillChunkState) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("request_id", s.request_id)?;
    dict.set_item("total_tokens", s.total_tokens)?;
    dict.set_item("processed_tokens", s.processed_tokens)?;
    dict.set_item("cached_tokens", s.cached_tokens)?;
    dict.set_item("priority", s.priority)?;
    Ok(dict)
}

/// One request's progress through prefill.
///
/// ``processed_tokens`` is the position in the prompt up to which the KV cache is filled:
/// it starts at ``cached_tokens`` (or ``total_tokens - 1`` when the whole prompt is cached,
/// since the last token's logits are still needed) and reaches ``total_tokens``.
#[pyclass(name = "PrefillChunkState", module = "chunked_prefill._core", eq)]
#[derive(Clone, PartialEq)]
struct PyPrefillChunkState {
    inner: PrefillChunkState,
}

#[pymethods]
impl PyPrefillChunkState {
    #[new]
    #[pyo3(signature = (
        request_id,
        total_tokens,
        *,
        cached_tokens = Arg(None),
        priority = Arg(None),
        processed_tokens = Arg(None),
    ), text_signature = "(request_id, total_tokens, *, cached_tokens=0, priority=0, \
        processed_tokens=None)")]
    fn new(
        request_id: &Bound<'_, PyAny>,
        total_tokens: &Bound<'_, PyAny>,
        cached_tokens: Arg<'_>,
        priority: Arg<'_>,
        processed_tokens: Arg<'_>,
    ) -> PyResult<Self> {
        let request_id = to_u64("request_id", request_id)?;
        let total_tokens = to_usize("total_tokens", total_tokens)?;
        let cached_tokens = usize_or(&cached_tokens, "cached_tokens", 0)?;
        let priority = i64_or(&priority, "priority", 0)?;
        let processed = match &processed_tokens.0 {
            Some(obj) if !obj.is_none() => Some(to_usize("processed_tokens", obj)?),
            _ => None,
        };
        let inner = match processed {
            None => {
                PrefillChunkState::with_prefix(request_id, total_tokens, cached_tokens, priority)
            }
            Some(p) => {
                PrefillChunkState::restored(request_id, total_tokens, p, cached_tokens, priority)
            }
        }
        .map_err(core_err)?;
        Ok(Self { inner })
    }

    /// The caller's id of the request.
    #[getter]
    fn request_id(&self) -> u64 {
        self.inner.request_id
    }

    /// Prompt length in tokens.
    #[getter]
    fn total_tokens(&self) -> usize {
        self.inner.total_tokens
    }

    /// Prompt position up to which prefill is done (cached prefix included).
    #[getter]
    fn processed_tokens(&self) -> usize {
        self.inner.processed_tokens
    }

    /// Whether the whole prompt is prefilled.
    #[getter]
    fn is_complete(&self) -> bool {
        self.inner.is_complete
    }

    /// Prompt tokens the engine's prefix cache already held at enqueue.
    #[getter]
    fn cached_tokens(&self) -> usize {
        self.inner.cached_tokens
    }

    /// Scheduling priority: lower values start first.
    #[getter]
    fn priority(&self) -> i64 {
        self.inner.priority
    }

    /// Advance by ``n`` tokens, clamped to ``total_tokens``.
    fn advance(&mut self, n: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = to_usize("n", n)?;
        self.inner.advance(n);
        Ok(())
    }

    /// Prompt tokens still to prefill.
    fn remaining(&self) -> usize {
        self.inner.remaining()
    }

    /// ``processed_tokens / total_tokens`` as a float in ``0.0..=1.0``.
    fn progress(&self) -> f64 {
        self.inner.progress()
    }

    /// Size of the next chunk under ``config``: ``min(remaining(), chunk_size)``.
    fn next_chunk_size(&self, config: &Bound<'_, PyAny>) -> PyResult<usize> {
        match config.cast::<PyConfig>() {
            Ok(config) => Ok(self.inner.next_chunk_size(&config.get().inner)),
            Err(_) => {
                slow_check("reject_config", "config", config)?;
                Ok(0)
            }
        }
    }

    /// The fields as plain values (the form of ``Scheduler.to_state()['requests']``).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        state_dict(py, &self.inner)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let py = slf.py();
        let s = &slf.borrow().inner;
        let kwargs = PyDict::new(py);
        kwargs.set_item("cached_tokens", s.cached_tokens)?;
        kwargs.set_item("priority", s.priority)?;
        kwargs.set_item("processed_tokens", s.processed_tokens)?;
        let args = PyTuple::new(py, [s.request_id, s.total_tokens as u64])?;
        reduce_new(slf.get_type(), args, kwargs)
    }

    fn __copy__(&self) -> Self {
        self.clone()
    }

    fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> Self {
        self.clone()
    }

    fn __repr__(&self) -> String {
        let s = &self.inner;
        format!(
            "PrefillChunkState(request_id={}, total_tokens={}, processed_tokens={}, \
             is_complete={}, cached_tokens={}, priority={})",
            s.request_id,
            s.total_tokens,
            s.processed_tokens,
            if s.is_complete { "True" } else { "False" },
            s.cached_tokens,
            s.priority
        )
    }
}

/// Plans engine steps: splits prompts into chunks and counts decode tokens.
///
/// Requests are tracked from ``enqueue`` until ``drain_completed`` (or ``abort``) removes
/// them. Each ``next_step`` plans one engine step and advances the scheduled requests at
/// once; the caller does not report completion back. Calls from several threads are
/// serialised by an internal lock.
#[pyclass(name = "Scheduler", module = "chunked_prefill._core", frozen)]
struct PyScheduler {
    inner: Mutex<ChunkedPrefillScheduler>,
}

impl PyScheduler {
    /// The scheduler, locked. Python code never runs while the guard is held, so a thread
    /// waiting here cannot be the one that holds it.
    fn lock(&self) -> PyResult<MutexGuard<'_, ChunkedPrefillScheduler>> {
        self.inner.lock().map_err(|_| {
            PyRuntimeError::new_err("the scheduler is unusable: an earlier call panicked")
        })
    }

    fn wrap(inner: ChunkedPrefillScheduler) -> Self {
        Self {
            inner: Mutex::new(inner),
        }
    }
}

#[pymethods]
impl PyScheduler {
    #[new]
    #[pyo3(signature = (config = None))]
    fn new(config: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let config = match config {
            None => ChunkedPrefillConfig::default(),
            Some(obj) if obj.is_none() => ChunkedPrefillConfig::default(),
            Some(obj) => match obj.cast::<PyConfig>() {
                Ok(config) => config.get().inner.clone(),
                Err(_) => {
                    slow_check("reject_config", "config", obj)?;
                    ChunkedPrefillConfig::default()
                }
            },
        };
        ChunkedPrefillScheduler::new(config)
            .map(Self::wrap)
            .map_err(core_err)
    }

    /// The scheduler's configuration.
    #[getter]
    fn config(&self) -> PyResult<PyConfig> {
        Ok(PyConfig {
            inner: self.lock()?.config().clone(),
        })
    }

    /// Track ``request_id`` with a prompt of ``total_tokens`` tokens.
    ///
    /// ``cached_tokens`` prompt tokens are already in the engine's prefix cache, so
    /// prefill starts there. Lower ``priority`` starts first; ties keep enqueue order.
    #[pyo3(
        signature = (request_id, total_tokens, *, cached_tokens = Arg(None), priority = Arg(None)),
        text_signature = "($self, request_id, total_tokens, *, cached_tokens=0, priority=0)"
    )]
    fn enqueue(
        &self,
        request_id: &Bound<'_, PyAny>,
        total_tokens: &Bound<'_, PyAny>,
        cached_tokens: Arg<'_>,
        priority: Arg<'_>,
    ) -> PyResult<()> {
        let request_id = to_u64("request_id", request_id)?;
        let total_tokens = to_usize("total_tokens", total_tokens)?;
        let cached_tokens = usize_or(&cached_tokens, "cached_tokens", 0)?;
        let priority = i64_or(&priority, "priority", 0)?;
        self.lock()?
            .enqueue_with(request_id, total_tokens, cached_tokens, priority)
            .map_err(core_err)
    }

    /// Plan the next engine step given ``active_decode_count`` decoding requests.
    ///
    /// Decodes first: ``decode_tokens = min(active_decode_count, max_decode_tokens)``
    /// (and at most ``token_budget``) when ``interleave_decode``, else 0. Then prefill
    /// chunks in scheduling order: started requests first, in the order they started,
    /// then waiting ones by priority and enqueue order.
    #[pyo3(
        signature = (active_decode_count = Arg(None)),
        text_signature = "($self, active_decode_count=0)"
    )]
    fn next_step(&self, active_decode_count: Arg<'_>) -> PyResult<PyStep> {
        let count = usize_or(&active_decode_count, "active_decode_count", 0)?;
        let inner = self.lock()?.next_step(count);
        Ok(PyStep { inner })
    }

    /// Stop tracking ``request_id`` wherever it is and return its last state.
    fn abort(&self, request_id: &Bound<'_, PyAny>) -> PyResult<PyPrefillChunkState> {
        let request_id = to_u64("request_id", request_id)?;
        let inner = self.lock()?.abort(request_id).map_err(core_err)?;
        Ok(PyPrefillChunkState { inner })
    }

    /// A copy of ``request_id``'s progress; ``KeyError`` if it is not tracked.
    fn state(&self, request_id: &Bound<'_, PyAny>) -> PyResult<PyPrefillChunkState> {
        let request_id = to_u64("request_id", request_id)?;
        let found = self.lock()?.state(request_id).cloned();
        found
            .map(|inner| PyPrefillChunkState { inner })
            .ok_or_else(|| core_err(CoreError::UnknownRequest { request_id }))
    }

    /// Whether no tracked request has prefill work left (an empty scheduler is idle).
    fn is_idle(&self) -> PyResult<bool> {
        Ok(self.lock()?.is_idle())
    }

    /// Stop tracking every completed request; return how many were removed.
    fn drain_completed(&self) -> PyResult<usize> {
        Ok(self.lock()?.drain_completed())
    }

    /// Requests tracked, completed-but-undrained ones included.
    fn active_count(&self) -> PyResult<usize> {
        Ok(self.lock()?.active_count())
    }

    /// Prefill chunks planned since the scheduler was made.
    fn chunks_scheduled<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.lock()?.chunks_scheduled();
        counter(py, value)
    }

    /// Prompt tokens planned since the scheduler was made (cached ones excluded).
    fn tokens_prefilled<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.lock()?.tokens_prefilled();
        counter(py, value)
    }

    /// The whole scheduler as plain Python values (see ``chunked_prefill._state``).
    fn to_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (config, counters, requests) = {
            let guard = self.lock()?;
            let requests: Vec<PrefillChunkState> = guard.requests().cloned().collect();
            (guard.config().clone(), guard.counters(), requests)
        };
        let items = PyList::empty(py);
        for state in &requests {
            items.append(state_dict(py, state)?)?;
        }
        py.import("chunked_prefill._state")?
            .getattr("build")?
            .call1((
                PyConfig { inner: config }.to_dict(py)?,
                counter(py, counters.step_index)?,
                counter(py, counters.chunks_scheduled)?,
                counter(py, counters.tokens_prefilled)?,
                items,
            ))
    }

    /// Rebuild a scheduler from ``to_state()``'s form (of either backend).
    #[classmethod]
    fn from_state(_cls: &Bound<'_, PyType>, state: &Bound<'_, PyAny>) -> PyResult<Self> {
        let parsed = state
            .py()
            .import("chunked_prefill._state")?
            .getattr("parse")?
            .call1((state,))?;
        let cfg = parsed.getattr("config")?;
        let config = ChunkedPrefillConfig {
            chunk_size: cfg.get_item("chunk_size")?.extract()?,
            max_decode_tokens: cfg.get_item("max_decode_tokens")?.extract()?,
            interleave_decode: cfg.get_item("interleave_decode")?.extract()?,
            token_budget: cfg.get_item("token_budget")?.extract()?,
            max_prefills_per_step: cfg.get_item("max_prefills_per_step")?.extract()?,
        };
        let (step_index, chunks_scheduled, tokens_prefilled): (u128, u128, u128) =
            parsed.getattr("counters")?.extract()?;
        let rows: Vec<(u64, usize, usize, usize, i64)> = parsed.getattr("requests")?.extract()?;
        let requests = rows.into_iter().map(
            |(request_id, total_tokens, processed_tokens, cached_tokens, priority)| {
                PrefillChunkState {
                    request_id,
                    total_tokens,
                    processed_tokens,
                    is_complete: processed_tokens == total_tokens,
                    cached_tokens,
                    priority,
                }
            },
        );
        let counters = Counters {
            step_index,
            chunks_scheduled,
            tokens_prefilled,
        };
        ChunkedPrefillScheduler::from_parts(config, counters, requests)
            .map(Self::wrap)
            .map_err(|(index, err)| match err {
                CoreError::CounterTooLarge { name, .. } => {
                    PyOverflowError::new_err(format!("state['{name}']: {err}"))
                }
                _ if index == usize::MAX => {
                    PyValueError::new_err(format!("state['config']: {err}"))
                }
                _ => PyValueError::new_err(format!("state['requests'][{index}]: {err}")),
            })
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyAny>,))> {
        let py = slf.py();
        let restore = py.get_type::<Self>().getattr("from_state")?;
        Ok((restore, (slf.get().to_state(py)?,)))
    }

    fn __copy__(&self) -> PyResult<Self> {
        Ok(Self::wrap(self.lock()?.clone()))
    }

    fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.__copy__()
    }

    fn __len__(&self) -> PyResult<usize> {
        self.active_count()
    }

    fn __contains__(&self, request_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        // Not a valid id: not tracked. Any other error (say, from a user's `__index__`)
        // propagates, as it does from the pure twin.
        match to_u64("request_id", request_id) {
            Ok(id) => Ok(self.lock()?.contains(id)),
            Err(err) => {
                let py = request_id.py();
                let invalid = err.is_instance_of::<PyTypeError>(py)
                    || err.is_instance_of::<PyValueError>(py)
                    || err.is_instance_of::<PyOverflowError>(py);
                if invalid {
                    Ok(false)
                } else {
                    Err(err)
                }
            }
        }
    }

    fn __repr__(&self) -> PyResult<String> {
        let guard = self.lock()?;
        let config = PyConfig {
            inner: guard.config().clone(),
        }
        .__repr__();
        let incomplete = guard.incomplete_count();
        Ok(format!(
            "Scheduler(config={config}, tracked={}, incomplete={incomplete}, next_step_index={})",
            guard.active_count(),
            guard.counters().step_index
        ))
    }
}

/// The compiled half of ``chunked_prefill``: the scheduler, implemented in Rust.
///
/// Free-threaded Python is supported (``gil_used = false``): the scheduler serialises
/// calls with its own lock and the value types are immutable.
#[pymodule(gil_used = false)]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("U64_MAX", u64::MAX)?;
    m.add("I64_MIN", i64::MIN)?;
    m.add("I64_MAX", i64::MAX)?;
    m.add("STATE_VERSION", 1)?;
    m.add_class::<PyConfig>()?;
    m.add_class::<PyChunk>()?;
    m.add_class::<PyStep>()?;
    m.add_class::<PyPrefillChunkState>()?;
    m.add_class::<PyScheduler>()?;
    Ok(())
}
