//! [`StepModel`]: how long a step of a given [`StepShape`] takes, by the linear model or
//! the roofline.

use super::engine::{EngineModel, StepShape};
use super::roofline::Roofline;

/// The engine's step-time model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepModel {
    /// Coefficients fitted to measured steps (`EngineModel`).
    Linear(EngineModel),
    /// Derived from the model's architecture and the GPU's datasheet.
    Roofline(Roofline),
}

impl StepModel {
    /// The modelled duration of a step of `shape`, in seconds.
    #[must_use]
    pub fn step_time(&self, shape: &StepShape) -> f64 {
        match self {
            Self::Linear(m) => m.step_time(shape),
            Self::Roofline(r) => r.step_time(shape),
        }
    }
}
