//! Kernel launches that check their argument count against the kernel's PTX signature, so a
//! wrapper that pushes too few or too many arguments is an error, not a crash in the driver.

use crate::device::Gpu;
use crate::error::{drv, CudaError, Result};
use cudarc::driver::{LaunchArgs, LaunchConfig, PushKernelArg};

/// Parameter counts of every `.entry` in a PTX text, by kernel name.
pub fn ptx_param_counts(ptx: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(i) = rest.find(".entry ") {
        rest = &rest[i + 7..];
        let name_end = rest
            .find(|c: char| c == '(' || c.is_whitespace())
            .unwrap_or(rest.len());
        let name = rest[..name_end].to_string();
        let params = match (rest.find('('), rest.find(')')) {
            (Some(a), Some(b)) if a < b => rest[a..b].matches(".param").count(),
            _ => 0,
        };
        out.push((name, params));
    }
    out
}

/// Names of the `.entry`s in a PTX text whose bodies lack `needle` (every kernel must wait in
/// `tf_follow` before it reads what the kernels before it wrote: src/graphs.rs).
pub fn entries_lacking(ptx: &str, needle: &str) -> Vec<String> {
    ptx.split(".entry ")
        .skip(1)
        .filter(|part| !part.contains(needle))
        .map(|part| {
            part.chars()
                .take_while(|&c| c != '(' && !c.is_whitespace())
                .collect()
        })
        .collect()
}

/// A launch being built: the cudarc builder plus the count of arguments pushed.
pub(crate) struct Launch<'a> {
    args: LaunchArgs<'a>,
    gpu: &'a Gpu,
    name: String,
    pushed: usize,
    want: usize,
}

impl<'a> Launch<'a> {
    pub(crate) fn new(gpu: &'a Gpu, args: LaunchArgs<'a>, name: &str, want: usize) -> Launch<'a> {
        Launch {
            args,
            gpu,
            name: name.to_string(),
            pushed: 0,
            want,
        }
    }

    /// Pushes one kernel argument.
    pub(crate) fn arg<T>(&mut self, a: T) -> &mut Self
    where
        LaunchArgs<'a>: PushKernelArg<T>,
    {
        self.args.arg(a);
        self.pushed += 1;
        self
    }

    /// Launches after checking the argument count (traced and synchronized under
    /// `TF_CUDA_TRACE`).
    ///
    /// # Safety
    /// The arguments must have the kernel's types in its order, and the buffers must hold what
    /// the kernel reads and writes.
    pub(crate) unsafe fn go(&mut self, cfg: LaunchConfig, during: &'static str) -> Result<()> {
        self.check_count()?;
        if crate::leave_out::skipped(&self.name) {
            return Ok(());
        }
        crate::ops::trace(&self.name);
        // SAFETY: the caller's contract; the count was checked above.
        unsafe { self.args.launch(cfg) }.map_err(drv(during))?;
        if crate::leave_out::doubled(&self.name) {
            // SAFETY: as above.
            unsafe { self.args.launch(cfg) }.map_err(drv(during))?;
        }
        crate::ops::traced(self.gpu, during)
    }

    /// [`go`](Self::go) as a cooperative launch: every block resident at once, or an error.
    ///
    /// # Safety
    /// As [`go`](Self::go).
    pub(crate) unsafe fn go_cooperative(
        &mut self,
        cfg: LaunchConfig,
        during: &'static str,
    ) -> Result<()> {
        self.check_count()?;
        // SAFETY: the caller's contract; the count was checked above.
        unsafe { self.args.launch_cooperative(cfg) }.map_err(drv(during))?;
        crate::ops::traced(self.gpu, during)
    }

    fn check_count(&self) -> Result<()> {
        if self.pushed != self.want {
            return Err(CudaError::Shape {
                op: "kernel launch",
                detail: format!(
                    "{} takes {} arguments, {} were pushed",
                    self.name, self.want, self.pushed
                ),
            });
        }
        Ok(())
    }
}
