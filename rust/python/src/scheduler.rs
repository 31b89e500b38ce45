//! `Scheduler`: the planner, the one mutable object, behind a lock.

use std::sync::{Mutex, MutexGuard};

use chunked_prefill::{
    ChunkedPrefillConfig, ChunkedPrefillScheduler, CoreError, Counters, PrefillChunkState,
};
use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyType};

use crate::config::PyConfig;
use crate::convert::{
    core_err, counter, i64_or, lookup_id, slow_check, to_u64, to_usize, usize_or, Arg,
};
use crate::state::{state_dict, PyPrefillChunkState};
use crate::values::PyStep;

/// Plans engine steps: splits prompts into chunks and counts decode tokens.
///
/// Requests are tracked from ``enqueue`` until ``drain_completed`` (or ``abort``) removes
/// them. Each ``next_step`` plans one engine step and advances the scheduled requests at
/// once; the caller does not report completion back. Calls from several threads are
/// serialised by an internal lock.
///
/// Arguments are converted before the lock is taken and no Python code runs while it is
/// held, so a finalizer, signal handler or ``__index__`` that calls back into this scheduler
/// during a call runs its own call whole, before or after that one. (The pure twin may
/// refuse such a call with ``RuntimeError`` instead; see ``chunked_prefill.pure.Scheduler``.)
#[pyclass(name = "Scheduler", module = "chunked_prefill._core", frozen)]
pub(crate) struct PyScheduler {
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
        Ok(PyPrefillChunkState::wrap(inner))
    }

    /// A copy of ``request_id``'s progress; ``KeyError`` if it is not tracked.
    fn state(&self, request_id: &Bound<'_, PyAny>) -> PyResult<PyPrefillChunkState> {
        let request_id = to_u64("request_id", request_id)?;
        let found = self.lock()?.state(request_id).cloned();
        found
            .map(PyPrefillChunkState::wrap)
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
        match lookup_id(request_id)? {
            Some(id) => Ok(self.lock()?.contains(id)),
            None => Ok(false),
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
