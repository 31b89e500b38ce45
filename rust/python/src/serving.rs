//! `ServingScheduler`: the serving scheduler, the one mutable serving object, behind a lock.
//!
//! Every method converts all of its arguments to Rust values first, then takes the lock, calls
//! the core and releases the lock before it builds any Python object.
//!
//! The caller's request ids (ints or strs) are translated to the core's `u64` ids by the id
//! map held under the same lock as the core, so the two never disagree (see `serving_ids`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use chunked_prefill::serving::{Batch, Prompt, ServingScheduler};
use chunked_prefill::CoreError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyType};

use crate::convert::{core_err, counter, i64_or, to_u64, type_error, Arg};
use crate::serving_args::{to_ids, to_prompt, to_tokens, Tokens};
use crate::serving_config::PyServingConfig;
use crate::serving_ids::{lookup_id, to_id, BatchIds, Failure, Id, Ids};
use crate::serving_state;
use crate::serving_values::{same_batch, PyBatch, PyRequestView};

/// The core scheduler and what the binding keeps beside it, under one lock.
#[derive(Clone)]
struct Locked {
    core: ServingScheduler,
    /// The caller's ids of the requests the core knows.
    ids: Ids,
    /// The caller's ids of the pending batch, captured at `schedule()`: an unpickled batch
    /// is compared by them (its own core ids are none).
    pending: Option<Arc<BatchIds>>,
    /// Core ids aborted while their item is in the pending batch: until `update`, its
    /// `token_ids` may still name them and `add_request` must refuse them as pending.
    deferred: Vec<u64>,
    /// The last batch planned, its caller's ids and `ids.releases()` then: a batch of the
    /// same core ids, none released since, has the same caller's ids (a step of the same
    /// decodes, the common case, shares them instead of building them again).
    last: Option<(Arc<Batch>, Arc<BatchIds>, u64)>,
}

/// What `update` gives back: the finished ids, and the ids released besides (dropped once
/// the lock is released).
struct Updated {
    finished: Vec<Id>,
    _released: Vec<Id>,
}

impl Locked {
    fn new(core: ServingScheduler, ids: Ids) -> Self {
        Self {
            core,
            ids,
            pending: None,
            deferred: Vec::new(),
            last: None,
        }
    }

    /// Plan a step, and capture its caller's ids.
    fn schedule(&mut self) -> PyResult<PyBatch> {
        let batch = self.core.schedule_shared().map_err(core_err)?;
        let releases = self.ids.releases();
        let ids = match &self.last {
            Some((last, ids, then)) if *then == releases && last.same_requests(&batch) => {
                Arc::clone(ids)
            }
            _ => Arc::new(self.ids.batch_ids(&batch)?),
        };
        self.last = Some((Arc::clone(&batch), Arc::clone(&ids), releases));
        self.pending = Some(Arc::clone(&ids));
        Ok(PyBatch::issued(batch, ids, 0))
    }

    /// `update`'s first check: `batch` is the pending one, compared by the caller's ids.
    fn check_pending(&self, batch: &PyBatch) -> Result<(), CoreError> {
        let got = batch.inner.step_index();
        match (self.core.pending_batch(), &self.pending) {
            (Some(pending), Some(ids)) => {
                if same_batch((pending, ids), (&batch.inner, &batch.ids)) {
                    Ok(())
                } else {
                    let expected = pending.step_index();
                    Err(CoreError::BatchStale { got, expected })
                }
            }
            _ => Err(CoreError::BatchNotPending { got }),
        }
    }

    /// Apply the pending batch (already checked to be `step_index`'s), then release the
    /// ids of the requests the core forgot.
    fn update(
        &mut self,
        step_index: u128,
        tokens: Tokens<Id>,
        finished: &[Id],
    ) -> Result<Updated, Failure> {
        let tokens = tokens.into_core(&self.ids);
        let (cores, temporary) = self.ids.core_or_temporary(finished);
        let name = |core| self.ids.id(core).or_else(|| temporary.get(&core)).cloned();
        let done = match self.core.update_step(step_index, tokens.as_core(), &cores) {
            Ok(done) => done.to_vec(),
            Err(err) => return Err(Failure::new(err, name)),
        };
        self.pending = None;
        let finished = done.iter().filter_map(|&core| self.ids.release(core));
        let finished = finished.collect();
        let deferred = std::mem::take(&mut self.deferred);
        let released = deferred.into_iter().filter_map(|c| self.ids.release(c));
        Ok(Updated {
            finished,
            _released: released.collect(),
        })
    }

    /// Cancel a request; its id is released at once unless the pending batch has an item
    /// for it, which `update` still reads.
    fn abort(&mut self, id: &Id) -> Result<Option<Id>, Failure> {
        let core = self.ids.core_or_next(id);
        if let Err(err) = self.core.abort(core) {
            return Err(Failure::new(err, |_| Some(id.clone())));
        }
        let in_batch = (self.core.pending_batch())
            .is_some_and(|batch| batch.request_ids().any(|item| item == core));
        if in_batch {
            self.deferred.push(core);
            return Ok(None);
        }
        Ok(self.ids.release(core))
    }

    /// The exported state and the caller's ids of its requests, in order.
    fn to_state(&self) -> PyResult<(chunked_prefill::serving::ServingState, Vec<Id>)> {
        let state = self.core.to_state().map_err(core_err)?;
        let ids = self.ids.ids(state.requests.iter().map(|r| r.request_id))?;
        Ok((state, ids))
    }
}

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
    inner: Mutex<Locked>,
    /// The issue number of the batch the last `schedule()` returned (0: none), written and
    /// read under the lock. A batch carrying it is the pending one itself (batches are
    /// immutable), so `update` can skip comparing it item by item.
    issued: AtomicU64,
    /// The batch the last `schedule()` returned, whose ``sampling_ids`` the next may share.
    last: Mutex<Option<Py<PyBatch>>>,
}

/// Issue numbers of `schedule()` calls, unique across schedulers.
static NEXT_ISSUE: AtomicU64 = AtomicU64::new(1);

impl PyServingScheduler {
    /// The scheduler, locked. Python code never runs while the guard is held, so a thread
    /// waiting here cannot be the one that holds it.
    fn lock(&self) -> PyResult<MutexGuard<'_, Locked>> {
        self.inner.lock().map_err(|_| {
            PyRuntimeError::new_err("the scheduler is unusable: an earlier call panicked")
        })
    }

    fn wrap(inner: Locked) -> Self {
        Self {
            inner: Mutex::new(inner),
            issued: AtomicU64::new(0),
            last: Mutex::new(None),
        }
    }

    /// The core id of `id` (or one the core knows not, for it to report) and what `call`
    /// makes of it, the error naming `id`.
    fn with_id<T>(
        &self,
        id: &Id,
        call: impl FnOnce(&ServingScheduler, u64) -> Result<T, CoreError>,
    ) -> PyResult<T> {
        let result = {
            let guard = self.lock()?;
            call(&guard.core, guard.ids.core_or_next(id))
        };
        result.map_err(|err| Failure::new(err, |_| Some(id.clone())).into_py_err())
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
        let core = ServingScheduler::new(config).map_err(core_err)?;
        Ok(Self::wrap(Locked::new(core, Ids::default())))
    }

    /// The scheduler's configuration.
    #[getter]
    fn config(&self) -> PyResult<PyServingConfig> {
        Ok(PyServingConfig {
            inner: self.lock()?.core.config().clone(),
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
        let id = to_id("request_id", request_id)?;
        let prompt = to_prompt(prompt)?;
        let max_new_tokens = to_u64("max_new_tokens", max_new_tokens)?;
        let priority = i64_or(&priority, "priority", 0)?;
        let cache_salt = match &cache_salt.0 {
            None => 0,
            Some(obj) => to_u64("cache_salt", obj)?,
        };
        let result = {
            let mut guard = self.lock()?;
            let core = guard.ids.core_or_next(&id);
            let added =
                (guard.core).add_request(core, prompt, max_new_tokens, priority, cache_salt);
            if added.is_ok() {
                guard.ids.intern(id.clone(), core);
            }
            added
        };
        result.map_err(|err| Failure::new(err, |_| Some(id.clone())).into_py_err())
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
            Prompt::Tokens(ids) => self.lock()?.core.cached_prefix_tokens(&ids, cache_salt),
            Prompt::Length(_) => 0,
        })
    }

    /// Plan the next step: decodes, then started prefills, then admissions of waiting
    /// requests (preempting the lowest-ranked running requests when blocks run out).
    ///
    /// Every batch, even an empty one, must be reported with ``update`` before the next
    /// ``schedule()``.
    fn schedule(&self, py: Python<'_>) -> PyResult<Py<PyBatch>> {
        let mut guard = self.lock()?;
        let mut batch = guard.schedule()?;
        batch.issue = NEXT_ISSUE.fetch_add(1, Ordering::Relaxed);
        self.issued.store(batch.issue, Ordering::Relaxed);
        drop(guard);
        // A poisoned lock only loses the sharing.
        let Ok(mut last) = self.last.lock() else {
            return Py::new(py, batch);
        };
        if let Some(previous) = last.as_ref() {
            batch.share_sampling_ids(py, previous.get());
        }
        let batch = Py::new(py, batch)?;
        *last = Some(batch.clone_ref(py));
        Ok(batch)
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
        let batch = match batch.cast::<PyBatch>() {
            Ok(batch) => batch.get(),
            Err(_) => return Err(type_error("not_batch", "batch", batch)),
        };
        // The batch is checked first; the arguments are then converted without the lock
        // (this may run Python code), and the batch is checked again under it. The batch
        // `schedule()` returned last is recognised without comparing items.
        let check = |locked: &Locked| {
            let own = batch.issue != 0
                && self.issued.load(Ordering::Relaxed) == batch.issue
                && locked.core.pending_batch().is_some();
            if own {
                Ok(())
            } else {
                locked.check_pending(batch).map_err(core_err)
            }
        };
        check(&*self.lock()?)?;
        let tokens = to_tokens(batch, token_ids)?;
        let finished = to_ids("finished", finished.0.as_ref())?;
        let updated = {
            let mut guard = self.lock()?;
            check(&guard)?;
            guard.update(batch.inner.step_index(), tokens, &finished)
        };
        let updated = updated.map_err(Failure::into_py_err)?;
        PyList::new(py, updated.finished.iter().map(|id| id.to_object(py)))
    }

    /// Cancel ``request_id`` at any time: its blocks are freed at once and its id
    /// forgotten. ``KeyError`` if it is not tracked.
    fn abort(&self, request_id: &Bound<'_, PyAny>) -> PyResult<()> {
        let id = to_id("request_id", request_id)?;
        let aborted = self.lock()?.abort(&id);
        aborted.map(drop).map_err(Failure::into_py_err)
    }

    /// A snapshot of ``request_id``; ``KeyError`` if it is not tracked.
    fn request(&self, request_id: &Bound<'_, PyAny>) -> PyResult<PyRequestView> {
        let id = to_id("request_id", request_id)?;
        let view = self.with_id(&id, |core, request_id| core.request(request_id))?;
        Ok(PyRequestView::new(view, id))
    }

    /// The KV-cache block ids of ``request_id`` in position order (empty while it waits);
    /// ``KeyError`` if it is not tracked.
    fn block_table<'py>(
        &self,
        py: Python<'py>,
        request_id: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let id = to_id("request_id", request_id)?;
        let table = self.with_id(&id, |core, request_id| {
            core.block_table(request_id).map(<[usize]>::to_vec)
        })?;
        PyList::new(py, table)
    }

    /// KV-cache blocks in the free queue (cached blocks no request holds included).
    #[getter]
    fn num_free_blocks(&self) -> PyResult<usize> {
        Ok(self.lock()?.core.num_free_blocks())
    }

    /// Requests holding blocks.
    #[getter]
    fn num_running(&self) -> PyResult<usize> {
        Ok(self.lock()?.core.num_running())
    }

    /// Requests waiting for admission (new or preempted).
    #[getter]
    fn num_waiting(&self) -> PyResult<usize> {
        Ok(self.lock()?.core.num_waiting())
    }

    /// Preemptions since the scheduler was made.
    #[getter]
    fn num_preemptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.lock()?.core.num_preemptions();
        counter(py, value)
    }

    /// Prompt tokens found in the prefix cache at admissions since the scheduler was made.
    #[getter]
    fn num_cached_tokens<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.lock()?.core.num_cached_tokens();
        counter(py, value)
    }

    /// The ``step_index`` the next ``schedule()`` gives its batch.
    #[getter]
    fn step_index<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.lock()?.core.step_index();
        counter(py, value)
    }

    /// The whole scheduler as plain Python values (see ``docs/serving-contract.md``).
    fn to_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (state, ids) = self.lock()?.to_state()?;
        serving_state::to_python(py, &state, &ids)
    }

    /// Rebuild a scheduler from ``to_state()``'s form (of either backend).
    #[classmethod]
    fn from_state(_cls: &Bound<'_, PyType>, state: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (state, ids) = serving_state::from_python(state)?;
        let core = ServingScheduler::from_state(state).map_err(core_err)?;
        Ok(Self::wrap(Locked::new(core, ids)))
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
        Ok(self.lock()?.core.len())
    }

    /// How many request ids the binding holds (tracked requests, and aborted ones the
    /// pending batch still names): for tests that the id map does not grow.
    #[getter]
    fn _num_request_ids(&self) -> PyResult<usize> {
        Ok(self.lock()?.ids.len())
    }

    fn __contains__(&self, request_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Some(id) = lookup_id(request_id)? else {
            return Ok(false);
        };
        let guard = self.lock()?;
        Ok((guard.ids.core(&id)).is_some_and(|core| guard.core.contains(core)))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let (config, running, waiting, free, step) = {
            let guard = self.lock()?;
            let core = &guard.core;
            (
                core.config().clone(),
                core.num_running(),
                core.num_waiting(),
                core.num_free_blocks(),
                core.step_index(),
            )
        };
        let config = PyServingConfig { inner: config }.repr(py)?;
        Ok(format!(
            "ServingScheduler(config={config}, running={running}, waiting={waiting}, \
             free_blocks={free}, next_step_index={step})"
        ))
    }
}
