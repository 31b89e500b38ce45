//! `ServingScheduler`: the serving scheduler, the one mutable serving object, behind a lock.
//!
//! Every method converts all of its arguments to Rust values first, then takes the lock, calls
//! the core and releases the lock before it builds any Python object.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use chunked_prefill::serving::{Batch, Prompt, ServingScheduler};
use chunked_prefill::CoreError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyType};

use crate::convert::{core_err, counter, i64_or, lookup_id, to_u64, type_error, Arg};
use crate::serving_args::{to_ids, to_prompt, to_tokens};
use crate::serving_config::PyServingConfig;
use crate::serving_state;
use crate::serving_values::{PyBatch, PyRequestView};

/// Plans the steps of a paged-attention engine: which requests run, which of their tokens
/// to compute, and which KV-cache blocks hold them.
///
/// ``add_request`` queues a request; each ``schedule()`` plans one step as a ``Batch``, which
/// the engine runs and reports back with ``update(batch, token_ids=...)`` before the next
/// ``schedule()``. Requests finish at ``max_new_tokens`` or when ``update`` names them in
/// ``finished``; ``abort`` cancels one at any time. Calls from several threads are
/// serialised by an internal lock.
#[pyclass(name = "ServingScheduler", module = "chunked_prefill._core", frozen)]
pub(crate) struct PyServingScheduler {
    inner: Mutex<ServingScheduler>,
    /// The issue number of the batch the last `schedule()` returned (0: none), written and
    /// read under the lock. A batch carrying it is the pending one itself (batches are
    /// immutable), so `update` can skip comparing it item by item.
    issued: AtomicU64,
}

/// Issue numbers of `schedule()` calls, unique across schedulers.
static NEXT_ISSUE: AtomicU64 = AtomicU64::new(1);

impl PyServingScheduler {
    /// The scheduler, locked. Python code never runs while the guard is held, so a thread
    /// waiting here cannot be the one that holds it.
    fn lock(&self) -> PyResult<MutexGuard<'_, ServingScheduler>> {
        self.inner.lock().map_err(|_| {
            PyRuntimeError::new_err("the scheduler is unusable: an earlier call panicked")
        })
    }

    pub(crate) fn wrap(inner: ServingScheduler) -> Self {
        Self {
            inner: Mutex::new(inner),
            issued: AtomicU64::new(0),
        }
    }
}

/// Whether `batch` is the one `scheduler` awaits an `update` for: `update`'s first checks,
/// made before its other arguments are converted.
fn check_pending(scheduler: &ServingScheduler, batch: &Batch) -> Result<(), CoreError> {
    let got = batch.step_index();
    match scheduler.pending_batch() {
        None => Err(CoreError::BatchNotPending { got }),
        Some(pending) if pending != batch => Err(CoreError::BatchStale {
            got,
            expected: pending.step_index(),
        }),
        Some(_) => Ok(()),
    }
}

#[pymethods]
impl PyServingScheduler {
    #[new]
    fn new(config: &Bound<'_, PyAny>) -> PyResult<Self> {
        let config = match config.cast::<PyServingConfig>() {
            Ok(config) => config.get().inner.clone(),
            Err(_) => return Err(type_error("not_serving_config", "config", config)),
        };
        ServingScheduler::new(config)
            .map(Self::wrap)
            .map_err(core_err)
    }

    /// The scheduler's configuration.
    #[getter]
    fn config(&self) -> PyResult<PyServingConfig> {
        Ok(PyServingConfig {
            inner: self.lock()?.config().clone(),
        })
    }

    /// Queue ``request_id`` with ``prompt`` (its token ids, or an int length when the ids
    /// are not known: such a prompt is never cached) to generate up to ``max_new_tokens``.
    ///
    /// Lower ``priority`` runs first and is preempted last; ties keep ``add_request`` order.
    /// ``cache_salt`` separates prefix caches: requests share cached blocks only with
    /// requests of the same salt.
    #[pyo3(
        signature = (request_id, prompt, max_new_tokens, *, priority = Arg(None), cache_salt = Arg(None)),
        text_signature = "($self, request_id, prompt, max_new_tokens, *, priority=0, cache_salt=0)"
    )]
    fn add_request(
        &self,
        request_id: &Bound<'_, PyAny>,
        prompt: &Bound<'_, PyAny>,
        max_new_tokens: &Bound<'_, PyAny>,
        priority: Arg<'_>,
        cache_salt: Arg<'_>,
    ) -> PyResult<()> {
        let request_id = to_u64("request_id", request_id)?;
        let prompt = to_prompt(prompt)?;
        let max_new_tokens = to_u64("max_new_tokens", max_new_tokens)?;
        let priority = i64_or(&priority, "priority", 0)?;
        let cache_salt = match &cache_salt.0 {
            None => 0,
            Some(obj) => to_u64("cache_salt", obj)?,
        };
        self.lock()?
            .add_request(request_id, prompt, max_new_tokens, priority, cache_salt)
            .map_err(core_err)
    }

    /// How many leading tokens of ``prompt`` (as ``add_request`` takes it; a bare length has
    /// no ids, so none), with this ``cache_salt``, the prefix cache holds: ``block_size``
    /// times the longest run of leading full blocks whose chain hash is in the pool, held or
    /// free but still hashed (0 with prefix caching off). Unlike admission it keeps no last
    /// token back, and it changes nothing.
    #[pyo3(
        signature = (prompt, *, cache_salt = Arg(None)),
        text_signature = "($self, prompt, *, cache_salt=0)"
    )]
    fn cached_prefix_tokens(
        &self,
        prompt: &Bound<'_, PyAny>,
        cache_salt: Arg<'_>,
    ) -> PyResult<u128> {
        let prompt = to_prompt(prompt)?;
        let cache_salt = match &cache_salt.0 {
            None => 0,
            Some(obj) => to_u64("cache_salt", obj)?,
        };
        Ok(match prompt {
            Prompt::Tokens(ids) => self.lock()?.cached_prefix_tokens(&ids, cache_salt),
            Prompt::Length(_) => 0,
        })
    }

    /// Plan the next step: decodes, then started prefills, then admissions of waiting
    /// requests (preempting the lowest-ranked running requests when blocks run out).
    ///
    /// Every batch, even an empty one, must be reported with ``update`` before the next
    /// ``schedule()``.
    fn schedule(&self) -> PyResult<PyBatch> {
        let mut guard = self.lock()?;
        let batch = guard.schedule_shared().map_err(core_err)?;
        let issue = NEXT_ISSUE.fetch_add(1, Ordering::Relaxed);
        self.issued.store(issue, Ordering::Relaxed);
        drop(guard);
        Ok(PyBatch::issued(batch, issue))
    }

    /// Report the pending ``batch`` as run: its requests advance, each sampling item gets
    /// its token from ``token_ids``, and full computed blocks enter the prefix cache.
    ///
    /// ``token_ids``: ``None`` (unknown tokens), a sequence aligned with
    /// ``batch.sampling_ids``, or a mapping of request id to token id. ``finished``: ids to
    /// finish now (say, at a stop token). Returns the ids that finished, in batch order, then
    /// the rest of ``finished`` in its order; their blocks are freed and their ids forgotten.
    #[pyo3(
        signature = (batch, *, token_ids = None, finished = Arg(None)),
        text_signature = "($self, batch, *, token_ids=None, finished=())"
    )]
    fn update<'py>(
        &self,
        batch: &Bound<'py, PyAny>,
        token_ids: Option<&Bound<'py, PyAny>>,
        finished: Arg<'py>,
    ) -> PyResult<Bound<'py, PyList>> {
        let py = batch.py();
        let (batch, issue) = match batch.cast::<PyBatch>() {
            Ok(batch) => (&*batch.get().inner, batch.get().issue),
            Err(_) => return Err(type_error("not_batch", "batch", batch)),
        };
        // The batch is checked first; the arguments are then converted without the lock
        // (this may run Python code), and the core checks the batch again under it.
        let own = |scheduler: &ServingScheduler| {
            issue != 0
                && self.issued.load(Ordering::Relaxed) == issue
                && scheduler.pending_batch().is_some()
        };
        {
            let guard = self.lock()?;
            if !own(&guard) {
                check_pending(&guard, batch).map_err(core_err)?;
            }
        }
        let tokens = to_tokens(batch, token_ids)?;
        let finished = to_ids("finished", finished.0.as_ref())?;
        let mut guard = self.lock()?;
        let done = if own(&guard) {
            guard.update_step(batch.step_index(), tokens.as_core(), &finished)
        } else {
            guard.update(batch, tokens.as_core(), &finished)
        };
        let done = done.map_err(core_err)?.to_vec();
        drop(guard);
        PyList::new(py, done)
    }

    /// Cancel ``request_id`` at any time: its blocks are freed at once and its id
    /// forgotten. ``KeyError`` if it is not tracked.
    fn abort(&self, request_id: &Bound<'_, PyAny>) -> PyResult<()> {
        let request_id = to_u64("request_id", request_id)?;
        self.lock()?.abort(request_id).map_err(core_err)
    }

    /// A snapshot of ``request_id``; ``KeyError`` if it is not tracked.
    fn request(&self, request_id: &Bound<'_, PyAny>) -> PyResult<PyRequestView> {
        let request_id = to_u64("request_id", request_id)?;
        let inner = self.lock()?.request(request_id).map_err(core_err)?;
        Ok(PyRequestView { inner })
    }

    /// The KV-cache block ids of ``request_id`` in position order (empty while it waits);
    /// ``KeyError`` if it is not tracked.
    fn block_table<'py>(
        &self,
        py: Python<'py>,
        request_id: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let request_id = to_u64("request_id", request_id)?;
        let table = self
            .lock()?
            .block_table(request_id)
            .map_err(core_err)?
            .to_vec();
        PyList::new(py, table)
    }

    /// KV-cache blocks in the free queue (cached blocks no request holds included).
    #[getter]
    fn num_free_blocks(&self) -> PyResult<usize> {
        Ok(self.lock()?.num_free_blocks())
    }

    /// Requests holding blocks.
    #[getter]
    fn num_running(&self) -> PyResult<usize> {
        Ok(self.lock()?.num_running())
    }

    /// Requests waiting for admission (new or preempted).
    #[getter]
    fn num_waiting(&self) -> PyResult<usize> {
        Ok(self.lock()?.num_waiting())
    }

    /// Preemptions since the scheduler was made.
    #[getter]
    fn num_preemptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.lock()?.num_preemptions();
        counter(py, value)
    }

    /// Prompt tokens found in the prefix cache at admissions since the scheduler was made.
    #[getter]
    fn num_cached_tokens<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.lock()?.num_cached_tokens();
        counter(py, value)
    }

    /// The ``step_index`` the next ``schedule()`` gives its batch.
    #[getter]
    fn step_index<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.lock()?.step_index();
        counter(py, value)
    }

    /// The whole scheduler as plain Python values (see ``docs/serving-contract.md``).
    fn to_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let state = self.lock()?.to_state().map_err(core_err)?;
        serving_state::to_python(py, &state)
    }

    /// Rebuild a scheduler from ``to_state()``'s form (of either backend).
    #[classmethod]
    fn from_state(_cls: &Bound<'_, PyType>, state: &Bound<'_, PyAny>) -> PyResult<Self> {
        let state = serving_state::from_python(state)?;
        ServingScheduler::from_state(state)
            .map(Self::wrap)
            .map_err(core_err)
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
        Ok(self.lock()?.len())
    }

    fn __contains__(&self, request_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        match lookup_id(request_id)? {
            Some(id) => Ok(self.lock()?.contains(id)),
            None => Ok(false),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let (config, running, waiting, free, step) = {
            let guard = self.lock()?;
            (
                guard.config().clone(),
                guard.num_running(),
                guard.num_waiting(),
                guard.num_free_blocks(),
                guard.step_index(),
            )
        };
        let config = PyServingConfig { inner: config }.repr(py)?;
        Ok(format!(
            "ServingScheduler(config={config}, running={running}, waiting={waiting}, \
             free_blocks={free}, next_step_index={step})"
        ))
    }
}
