//! PyO3 bindings of the `chunked-prefill` core: a thin translation of types and errors.
//!
//! Every rule lives in the core; this crate converts Python values to Rust ones (the slow
//! path of an unusual argument goes through `chunked_prefill._validate`, so both backends
//! raise the same message), maps each core error to one Python exception class in
//! `convert::core_err`, and never holds the scheduler's lock while running Python code.
//!
//! One module per family: `convert` (argument conversion and errors, shared by every
//! class), `config` (`Config`), `values` (`Chunk`, `Step`), `state`
//! (`PrefillChunkState`), `scheduler` (`Scheduler`), the `serving*` modules (the serving
//! scheduler's classes), `sim` (`simulate_serving`, the simulation loop), `synthetic`
//! (`chat_workload`, the default workload's draws) and `trace` (`read_trace`, the fast
//! trace reader).

use pyo3::prelude::*;

mod config;
mod convert;
mod scheduler;
mod serving;
mod serving_args;
mod serving_config;
mod serving_ids;
mod serving_state;
mod serving_values;
mod sim;
mod state;
mod synthetic;
mod trace;
mod values;

use config::PyConfig;
use scheduler::PyScheduler;
use serving::PyServingScheduler;
use serving_config::PyServingConfig;
use serving_values::{PyBatch, PyBatchItem, PyRequestView};
use state::PyPrefillChunkState;
use values::{PyChunk, PyStep};

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
    m.add_class::<PyServingConfig>()?;
    m.add_class::<PyBatchItem>()?;
    m.add_class::<PyBatch>()?;
    m.add_class::<PyRequestView>()?;
    m.add_class::<PyServingScheduler>()?;
    m.add_function(wrap_pyfunction!(sim::simulate_serving, m)?)?;
    m.add_function(wrap_pyfunction!(trace::read_trace, m)?)?;
    m.add_function(wrap_pyfunction!(synthetic::chat_workload, m)?)?;
    Ok(())
}
