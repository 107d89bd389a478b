//! Opening a checkpoint, validating it into a plan, and building its family's forward.

use crate::error::ModelError;
use crate::llama::Llama;
use crate::model::Model;
use crate::nemotron_h::NemotronH;
use std::path::Path;
use std::sync::Arc;
use tf_families::ModelPlan;
use tf_formats::checkpoint::Checkpoint;

/// How to build a model.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Worker threads for the kernels.
    pub threads: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        LoadOptions { threads }
    }
}

/// Opens `path`, validates it (refusing by name what cannot be served exactly) and builds its
/// forward. Weights stay memory-mapped.
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Box<dyn Model>, ModelError> {
    let ck = Arc::new(Checkpoint::open(path)?);
    let plan = tf_families::plan(ck.config(), ck.entries())
        .map_err(|refusal| ModelError::Refused { refusal })?;
    match &plan {
        ModelPlan::Llama(p) => Ok(Box::new(Llama::new(ck, p, opts.threads)?)),
        ModelPlan::MuseSpark(p) => Ok(Box::new(crate::muse_spark::MuseSpark::new(
            ck,
            p,
            opts.threads,
        )?)),
        ModelPlan::NemotronH(p) => Ok(Box::new(NemotronH::new(ck, p, opts.threads)?)),
    }
}
