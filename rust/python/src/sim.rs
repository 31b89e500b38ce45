//! `simulate_serving`: the core's simulation loop ([`chunked_prefill::sim::run`]) for
//! `chunked_prefill.sim`. Arrays cross the boundary as little-endian bytes (numpy's
//! `tobytes()` one way, `numpy.frombuffer` the other), so no Python object is made per
//! request or per step; the run itself releases the GIL, taking it back only every
//! [`SIGNAL_POLL`] to run the interpreter's signal handlers ([`Signals`]).

use std::time::{Duration, Instant};

use chunked_prefill::sim::{
    run_fleet_until, EngineModel, Fleet, Outcome, Roofline, Router, SimError, SimOptions,
    StepModel, TokenPlan, Workload,
};
use chunked_prefill::ServingConfig;
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// `count` little-endian 8-byte values of `bytes`, named `name` in an error.
fn words<T>(
    name: &str,
    bytes: &[u8],
    count: Option<usize>,
    conv: fn([u8; 8]) -> T,
) -> PyResult<Vec<T>> {
    if bytes.len() % 8 != 0 || count.is_some_and(|n| bytes.len() != 8 * n) {
        return Err(PyValueError::new_err(format!(
            "{name} must hold {} 8-byte values, got {} bytes",
            count.map_or_else(|| "whole".to_owned(), |n| n.to_string()),
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| {
            let mut word = [0; 8];
            word.copy_from_slice(c);
            conv(word)
        })
        .collect())
}

/// The little-endian words of `values`, written straight into a new `bytes` (a long run's
/// token gaps are tens of megabytes: no copy of them in between).
fn to_bytes<'py, T: Copy>(
    py: Python<'py>,
    values: impl ExactSizeIterator<Item = T>,
    conv: fn(T) -> [u8; 8],
) -> PyResult<Bound<'py, PyBytes>> {
    PyBytes::new_with(py, values.len() * 8, |buf| {
        for (word, v) in buf.chunks_exact_mut(8).zip(values) {
            word.copy_from_slice(&conv(v));
        }
        Ok(())
    })
}

/// [`to_bytes`] of a column of the outcome, which is freed at once: the run's records and
/// their Python copies are never all held together.
fn take_bytes<'py, T: Copy>(
    py: Python<'py>,
    column: &mut Vec<T>,
    conv: fn(T) -> [u8; 8],
) -> PyResult<Bound<'py, PyBytes>> {
    let values = std::mem::take(column);
    to_bytes(py, values.into_iter(), conv)
}

/// Run the serving simulation loop; see ``chunked_prefill.sim.serving`` for the meaning of
/// every argument and of the returned dict. An exception raised by a signal handler during
/// the run (``KeyboardInterrupt``) stops it and is raised in place of its result.
#[pyfunction]
#[pyo3(signature = (
    arrival_s, prompt_tokens, output_tokens, priority, known, prefix_tokens, group, session,
    hash_block, hash_offsets, hash_ids, *, num_blocks, block_size, token_budget, chunk_size,
    max_prefills_per_step, max_running, watermark, prefix_caching, engine, max_steps,
    roofline=None, replicas = 1, router = "round-robin"
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn simulate_serving<'py>(
    py: Python<'py>,
    arrival_s: Vec<f64>,
    prompt_tokens: Vec<u64>,
    output_tokens: Vec<u64>,
    priority: &[u8],
    known: &[u8],
    prefix_tokens: u64,
    group: &[u8],
    session: &[u8],
    hash_block: u64,
    hash_offsets: &[u8],
    hash_ids: &[u8],
    num_blocks: usize,
    block_size: usize,
    token_budget: usize,
    chunk_size: usize,
    max_prefills_per_step: usize,
    max_running: usize,
    watermark: f64,
    prefix_caching: bool,
    engine: (f64, f64, f64, f64, f64, f64),
    max_steps: u64,
    roofline: Option<Vec<f64>>,
    replicas: usize,
    router: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let fleet = fleet(replicas, router)?;
    let mut workload = workload_of(
        (arrival_s, prompt_tokens, output_tokens),
        priority,
        known,
        prefix_tokens,
        (group, session),
        (hash_block, hash_offsets, hash_ids),
    )?;
    let options = SimOptions {
        config: ServingConfig {
            num_blocks,
            block_size,
            token_budget,
            chunk_size,
            max_prefills_per_step,
            max_running,
            watermark,
            prefix_caching,
        },
        engine: step_model(engine, roofline)?,
        max_steps,
    };
    let mut signals = Signals::new(py)?;
    let outcome = py.detach(|| {
        run_fleet_until(&workload, &options, &fleet, &mut || {
            handler_raised(&mut signals)
        })
    });
    let outcome = outcome.map_err(|e| run_error(e, &mut signals))?;
    let d = outcome_dict(py, outcome)?;
    // The summary needs these two columns as arrays: read out of the caller's tuples again
    // they would cost 3-4 ms each at 100 000 requests, a fiftieth of the run.
    d.set_item(
        "arrival_s",
        take_bytes(py, &mut workload.arrival_s, f64::to_le_bytes)?,
    )?;
    let output = take_bytes(py, &mut workload.output_tokens, u64::to_le_bytes)?;
    d.set_item("output_tokens", output)?;
    Ok(d)
}

/// The workload of a run from its columns: the three columns every request has, and the
/// optional ones as little-endian bytes (empty when the workload has none); the
/// [`TokenPlan`]'s shape checked.
fn workload_of(
    (arrival_s, prompt_tokens, output_tokens): (Vec<f64>, Vec<u64>, Vec<u64>),
    priority: &[u8],
    known: &[u8],
    prefix_tokens: u64,
    (group, session): (&[u8], &[u8]),
    (hash_block, hash_offsets, hash_ids): (u64, &[u8], &[u8]),
) -> PyResult<Workload> {
    let n = arrival_s.len();
    for (name, len) in [
        ("prompt_tokens", prompt_tokens.len()),
        ("output_tokens", output_tokens.len()),
    ] {
        if len != n {
            return Err(PyValueError::new_err(format!(
                "{name} must hold {n} values (one per arrival), got {len}"
            )));
        }
    }
    let optional = |len: usize| (len > 0).then_some(n);
    let workload = Workload {
        prompt_tokens,
        output_tokens,
        priority: words(
            "priority",
            priority,
            optional(priority.len()),
            i64::from_le_bytes,
        )?,
        tokens: TokenPlan {
            known: known.iter().map(|&b| b != 0).collect(),
            prefix_tokens,
            group: words("group", group, optional(group.len()), u64::from_le_bytes)?,
            session: words(
                "session",
                session,
                optional(session.len()),
                u64::from_le_bytes,
            )?,
            hash_block,
            hash_offsets: words(
                "hash_offsets",
                hash_offsets,
                optional(hash_offsets.len()).map(|n| n + 1),
                |w| u64::from_le_bytes(w) as usize,
            )?,
            hash_ids: words("hash_ids", hash_ids, None, u64::from_le_bytes)?,
        },
        arrival_s,
    };
    check_token_plan(&workload, known.len())?;
    Ok(workload)
}

/// The Python exception of a run's error: the signal handler's own when a handler stopped
/// it, `MemoryError` when it ran out of memory, `ValueError` otherwise.
fn run_error(e: SimError, signals: &mut Signals) -> PyErr {
    match e {
        SimError::Interrupted { .. } => {
            (signals.error.take()).unwrap_or_else(|| PyValueError::new_err(e.to_string()))
        }
        SimError::OutOfMemory { .. } => PyMemoryError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// How often a run takes the GIL back to run signal handlers: well under a human's notice
/// of a Ctrl-C, and rare enough that a Python thread holding the GIL meanwhile (each take
/// may wait out its switch interval, 5 ms) slows the run by a few percent at most.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The stop hook of a run with the GIL released: Python runs signal handlers only on its
/// main thread, between bytecodes, so a loop in Rust must run them itself or Ctrl-C (and the
/// CLI's SIGTERM handler) would wait for the whole run. The exception a handler raises
/// (`KeyboardInterrupt`, `Terminated`) stops the run and is raised in place of its result.
struct Signals {
    /// Off Python's main thread no handler runs, so there is nothing to poll.
    main_thread: bool,
    last: Instant,
    error: Option<PyErr>,
}

impl Signals {
    fn new(py: Python<'_>) -> PyResult<Self> {
        let threading = py.import("threading")?;
        let main = threading.call_method0("main_thread")?;
        let current = threading.call_method0("current_thread")?;
        Ok(Self {
            main_thread: main.is(&current),
            last: Instant::now(),
            error: None,
        })
    }
}

/// Whether a signal handler raised (its exception kept in `signals`), checked at most every
/// [`SIGNAL_POLL`]. A free function: no `&mut self` in the bindings, where that would
/// mean a borrow flag on a class (`tests/test_reentry.py`); `Signals` is no class.
fn handler_raised(signals: &mut Signals) -> bool {
    if !signals.main_thread || signals.last.elapsed() < SIGNAL_POLL {
        return false;
    }
    signals.last = Instant::now();
    signals.error = Python::attach(|py| py.check_signals().err());
    signals.error.is_some()
}

/// The token plan's shape: one `known` byte per request (or none), and hash offsets that
/// rise from 0 to the number of hash ids.
fn check_token_plan(workload: &Workload, known: usize) -> PyResult<()> {
    if !(known == 0 || known == workload.len()) {
        return Err(PyValueError::new_err(
            "known must hold one byte per request",
        ));
    }
    if let Some(&last) = workload.tokens.hash_offsets.last() {
        let offsets = &workload.tokens.hash_offsets;
        if offsets[0] != 0
            || offsets.windows(2).any(|w| w[0] > w[1])
            || last != workload.tokens.hash_ids.len()
        {
            return Err(PyValueError::new_err(
                "hash_offsets must rise from 0 to len(hash_ids)",
            ));
        }
    }
    Ok(())
}

/// The roofline when its coefficients are given, the linear model of `engine` otherwise.
fn step_model(
    engine: (f64, f64, f64, f64, f64, f64),
    roofline: Option<Vec<f64>>,
) -> PyResult<StepModel> {
    if let Some(c) = roofline {
        return Ok(StepModel::Roofline(roofline_of(&c)?));
    }
    let (t_min_s, c0_s, c_tok_s, c_attn_s, c_kv_s, c_chunk_sq_s) = engine;
    Ok(StepModel::Linear(EngineModel {
        t_min_s,
        c0_s,
        c_tok_s,
        c_attn_s,
        c_kv_s,
        c_chunk_sq_s,
    }))
}

/// The roofline of its 21 coefficients, in the order of Python's `roofline.COEFFICIENTS`.
fn roofline_of(c: &[f64]) -> PyResult<Roofline> {
    let &[overhead_s, token_s, gemm_fixed_s, expert_fixed_s, head_row_s, dense_read_s, expert_read_s, experts, expert_miss, pair_s, chunk_sq_s, kv_token_s, allreduce_call_s, allreduce_token_s, launch_s, cpu_step_s, seq_s, window_tokens, window_pair_s, window_kv_token_s, kv_half_seqs] =
        c
    else {
        return Err(PyValueError::new_err(format!(
            "roofline must hold 21 coefficients, got {}",
            c.len()
        )));
    };
    if c.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return Err(PyValueError::new_err(
            "roofline coefficients must be finite and at least 0",
        ));
    }
    Ok(Roofline {
        overhead_s,
        token_s,
        gemm_fixed_s,
        expert_fixed_s,
        head_row_s,
        dense_read_s,
        expert_read_s,
        experts,
        expert_miss,
        pair_s,
        chunk_sq_s,
        kv_token_s,
        allreduce_call_s,
        allreduce_token_s,
        launch_s,
        cpu_step_s,
        seq_s,
        window_tokens,
        window_pair_s,
        window_kv_token_s,
        kv_half_seqs,
    })
}

/// The fleet of `replicas` behind the router named `router`.
fn fleet(replicas: usize, router: &str) -> PyResult<Fleet> {
    if replicas == 0 {
        return Err(PyValueError::new_err("replicas must be at least 1, got 0"));
    }
    let router = Router::parse(router).ok_or_else(|| {
        PyValueError::new_err(format!(
            "router must be one of {}, got {router:?}",
            Router::NAMES.join(", ")
        ))
    })?;
    Ok(Fleet { replicas, router })
}

fn outcome_dict<'py>(py: Python<'py>, mut o: Outcome) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let f = |v: f64| v.to_le_bytes();
    let u = |v: u64| v.to_le_bytes();
    let gaps = std::mem::take(&mut o.gaps);
    d.set_item("gap_values", to_bytes(py, gaps.iter().map(|g| g.0), f)?)?;
    d.set_item("gap_weights", to_bytes(py, gaps.iter().map(|g| g.1), u)?)?;
    drop(gaps);
    d.set_item("admitted", take_bytes(py, &mut o.admitted, f)?)?;
    d.set_item("first_token", take_bytes(py, &mut o.first_token, f)?)?;
    d.set_item("finish", take_bytes(py, &mut o.finish, f)?)?;
    d.set_item("max_gap", take_bytes(py, &mut o.max_gap, f)?)?;
    // Counts that are all 0 (no cache hit, no preemption, one replica) come back empty: the
    // caller's zeros take no memory until written, 8 MB a million requests each.
    for (key, column) in [
        ("cached_tokens", &mut o.cached_tokens),
        ("preemptions", &mut o.preemptions),
        ("recomputed_tokens", &mut o.recomputed_tokens),
        ("replica", &mut o.replica),
    ] {
        if column.iter().all(|&v| v == 0) {
            column.clear();
        }
        d.set_item(key, take_bytes(py, column, u)?)?;
    }
    d.set_item("kv_series_t", take_bytes(py, &mut o.kv_series_t, f)?)?;
    d.set_item(
        "kv_series_blocks",
        take_bytes(py, &mut o.kv_series_blocks, u)?,
    )?;
    d.set_item("steps", o.steps)?;
    d.set_item("prefill_tokens", o.prefill_tokens)?;
    d.set_item("decode_tokens", o.decode_tokens)?;
    d.set_item("kv_block_seconds", o.kv_block_seconds)?;
    d.set_item("busy_s", o.busy_s)?;
    d.set_item("kv_peak_blocks", o.kv_peak_blocks)?;
    d.set_item("kv_stride", o.kv_stride)?;
    Ok(d)
}
