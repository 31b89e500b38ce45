//! `PrefillChunkState`: one request's progress through prefill.

use std::sync::{Mutex, MutexGuard};

use chunked_prefill::PrefillChunkState;
use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyTuple};

use crate::config::PyConfig;
use crate::convert::{
    core_err, i64_or, reduce_new, slow_check, to_u64, to_usize, usize_or, Arg, Reduced,
};

pub(crate) fn state_dict<'py>(
    py: Python<'py>,
    s: &PrefillChunkState,
) -> PyResult<Bound<'py, PyDict>> {
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
///
/// ``advance`` is atomic: calls from several threads never lose an update.
// Frozen, with the one mutable value behind a lock instead of a `RefCell` borrow: a
// `&mut self` method would hold its borrow while converting an argument (which may run a
// user's `__index__`), so another thread, or that `__index__` itself, reading the same state
// would hit "Already borrowed". Arguments are converted before the lock is taken, and the
// lock is never held while Python code runs, so no call order can deadlock or fail.
#[pyclass(name = "PrefillChunkState", module = "chunked_prefill._core", frozen)]
pub(crate) struct PyPrefillChunkState {
    inner: Mutex<PrefillChunkState>,
}

impl PyPrefillChunkState {
    /// A Python state holding `inner`.
    pub(crate) fn wrap(inner: PrefillChunkState) -> Self {
        Self {
            inner: Mutex::new(inner),
        }
    }

    /// The state, locked. Nothing under this lock can panic (the core's `advance` is plain
    /// saturating arithmetic), so a poisoned lock still holds a whole state: take it.
    fn lock(&self) -> MutexGuard<'_, PrefillChunkState> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A copy of the state as it is now.
    fn snapshot(&self) -> PrefillChunkState {
        self.lock().clone()
    }
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
        Ok(Self::wrap(inner))
    }

    /// The caller's id of the request.
    #[getter]
    fn request_id(&self) -> u64 {
        self.lock().request_id
    }

    /// Prompt length in tokens.
    #[getter]
    fn total_tokens(&self) -> usize {
        self.lock().total_tokens
    }

    /// Prompt position up to which prefill is done (cached prefix included).
    #[getter]
    fn processed_tokens(&self) -> usize {
        self.lock().processed_tokens
    }

    /// Whether the whole prompt is prefilled.
    #[getter]
    fn is_complete(&self) -> bool {
        self.lock().is_complete
    }

    /// Prompt tokens the engine's prefix cache already held at enqueue.
    #[getter]
    fn cached_tokens(&self) -> usize {
        self.lock().cached_tokens
    }

    /// Scheduling priority: lower values start first.
    #[getter]
    fn priority(&self) -> i64 {
        self.lock().priority
    }

    /// Advance by ``n`` tokens, clamped to ``total_tokens``, atomically.
    ///
    /// ``n`` is converted first (its ``__index__`` may run Python code, even code that uses
    /// this state); the update itself runs no Python code, so concurrent calls never lose
    /// an update.
    fn advance(&self, n: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = to_usize("n", n)?;
        self.lock().advance(n);
        Ok(())
    }

    /// Prompt tokens still to prefill.
    fn remaining(&self) -> usize {
        self.lock().remaining()
    }

    /// ``processed_tokens / total_tokens`` as a float in ``0.0..=1.0``.
    fn progress(&self) -> f64 {
        self.lock().progress()
    }

    /// Size of the next chunk under ``config``: ``min(remaining(), chunk_size)``.
    fn next_chunk_size(&self, config: &Bound<'_, PyAny>) -> PyResult<usize> {
        match config.cast::<PyConfig>() {
            Ok(config) => Ok(self.lock().next_chunk_size(&config.get().inner)),
            Err(_) => {
                slow_check("reject_config", "config", config)?;
                Ok(0)
            }
        }
    }

    /// The fields as plain values (the form of ``Scheduler.to_state()['requests']``).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        state_dict(py, &self.snapshot())
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let py = slf.py();
        let s = slf.get().snapshot();
        let kwargs = PyDict::new(py);
        kwargs.set_item("cached_tokens", s.cached_tokens)?;
        kwargs.set_item("priority", s.priority)?;
        kwargs.set_item("processed_tokens", s.processed_tokens)?;
        let args = PyTuple::new(py, [s.request_id, s.total_tokens as u64])?;
        reduce_new(slf.get_type(), args, kwargs)
    }

    fn __copy__(&self) -> Self {
        Self::wrap(self.snapshot())
    }

    fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> Self {
        self.__copy__()
    }

    /// Equal when every field is; states are mutable, so they are not hashable.
    fn __richcmp__<'py>(
        &self,
        other: &Bound<'py, PyAny>,
        op: CompareOp,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = other.py();
        let not_implemented = || Ok(py.NotImplemented().into_bound(py));
        let Ok(other) = other.cast::<Self>() else {
            return not_implemented();
        };
        // One snapshot at a time: `other` may be this very state, and the lock is not
        // reentrant.
        let mine = self.snapshot();
        let equal = mine == other.get().snapshot();
        let result = match op {
            CompareOp::Eq => equal,
            CompareOp::Ne => !equal,
            _ => return not_implemented(),
        };
        Ok(PyBool::new(py, result).to_owned().into_any())
    }

    fn __repr__(&self) -> String {
        let s = self.snapshot();
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
