//! The CUDA backend's candidate selection ([`Model::forward_candidates`]): a round runs as
//! usual but its logits stay on the device; the selection kernel (crate::select) picks each
//! wanted row's largest logits there and only those come down. The whole rows stay in the
//! model's logits buffer until its next round, for [`Model::candidate_row`] (a draw the
//! candidates do not decide) and [`Model::candidate_logits`]. The logits of the tokens each
//! row's penalties touch (`extra`) are gathered for all rows at once, in the same round.
//!
//! A round of more rows than one launch sequence takes overwrites the device buffer chunk by
//! chunk; such a round (a long prefill) keeps its wanted rows on the host instead and selects
//! there ([`RowCandidates::of_row`], the reference the kernel equals bit for bit).
//!
//! [`Model::forward_candidates`]: tf_models::Model::forward_candidates
//! [`Model::candidate_row`]: tf_models::Model::candidate_row
//! [`Model::candidate_logits`]: tf_models::Model::candidate_logits

use super::{backend, host_err, CudaModel, GRAPH_ROWS};
use crate::select::{gather, select, GpuCandidates, SELECT_CAP};
use tf_models::{ModelError, Row, RowCandidates, StreamState};

type ModelResult<T> = std::result::Result<T, ModelError>;

/// Where the latest candidate round's whole rows are.
pub(super) enum Kept {
    /// No candidate round yet (or the latest failed).
    Nothing,
    /// In the device logits buffer: wanted row k is buffer row `rows[k]`.
    Device(Vec<usize>),
    /// On the host: the wanted rows in order, `vocab` each.
    Host(Vec<f32>),
}

impl CudaModel {
    /// Candidates per row, or 0 when the GPU model does not expose its logits.
    pub(super) fn selection_capacity(&self) -> usize {
        if self.model.logits_device().is_some() {
            SELECT_CAP
        } else {
            0
        }
    }

    /// One round whose wanted rows come back as candidates, wanted row k's carrying the logits
    /// of `extra[k]`.
    pub(super) fn select_round(
        &mut self,
        rows: &[Row],
        states: &mut [&mut StreamState],
        extra: &[Vec<u32>],
        out: &mut Vec<RowCandidates>,
    ) -> ModelResult<()> {
        use tf_models::Model;
        self.kept = Kept::Nothing;
        out.clear();
        if self.selection_capacity() == 0 {
            return Err(host_err(
                "this GPU model does not expose its logits: no candidate selection".into(),
            ));
        }
        let vocab = self.info.vocab_size;
        if let Some(&id) = extra.iter().flatten().find(|&&i| i as usize >= vocab) {
            return Err(ModelError::TokenOutOfRange { token: id, vocab });
        }
        if rows.len() > self.model.max_rows() {
            let mut host = Vec::new();
            self.forward(rows, states, &mut host)?;
            for (k, r) in host.chunks(vocab).enumerate() {
                let mut c = RowCandidates::of_row(r, SELECT_CAP);
                let ids = extra.get(k).map_or(&[][..], |e| &e[..]);
                c.extra = ids.iter().map(|&i| (i, r[i as usize])).collect();
                out.push(c);
            }
            self.kept = Kept::Host(host);
            return Ok(());
        }
        self.prepare(rows, states)?;
        let wanted: Vec<usize> = (0..self.rows.len())
            .filter(|&i| self.rows[i].logits)
            .collect();
        // No row asks the model for logits: the selection reads them on the device.
        self.rows.iter_mut().for_each(|r| r.logits = false);
        let rows_taken = std::mem::take(&mut self.rows);
        let ran = if rows_taken.len() <= GRAPH_ROWS {
            self.model.forward_graphed(&rows_taken, &mut self.part)
        } else {
            self.model.forward(&rows_taken, &mut self.part)
        };
        self.rows = rows_taken;
        ran.map_err(backend)?;
        for r in rows {
            states[r.stream].len = r.pos + 1;
        }
        if wanted.is_empty() {
            self.kept = Kept::Device(wanted);
            return Ok(());
        }
        let gpu = self.model.gpu();
        let cands = match self.cands.take() {
            Some(c) if c.rows() >= wanted.len() => c,
            _ => GpuCandidates::new(gpu, self.model.max_rows(), SELECT_CAP).map_err(backend)?,
        };
        let dev = self
            .model
            .logits_device()
            .ok_or_else(|| host_err("the device logits went away".into()))?;
        let mut cands = cands;
        let selected = select(gpu, dev, &wanted, vocab, &mut cands)
            .and_then(|()| cands.download(gpu, wanted.len()));
        self.cands = Some(cands);
        out.extend(selected.map_err(backend)?);
        // Every row's extra logits in one gather.
        let at: Vec<(usize, u32)> = wanted
            .iter()
            .enumerate()
            .flat_map(|(k, &r)| extra.get(k).into_iter().flatten().map(move |&i| (r, i)))
            .collect();
        let mut vals = gather(gpu, dev, vocab, &at).map_err(backend)?.into_iter();
        for (k, c) in out.iter_mut().enumerate() {
            let ids = extra.get(k).map_or(&[][..], |e| &e[..]);
            c.extra = ids
                .iter()
                .map(|&i| (i, vals.next().unwrap_or(f32::NAN)))
                .collect();
        }
        self.kept = Kept::Device(wanted);
        Ok(())
    }

    /// The whole row of wanted row `k` of the latest candidate round.
    pub(super) fn kept_row(&mut self, k: usize, out: &mut Vec<f32>) -> ModelResult<()> {
        let vocab = self.info.vocab_size;
        match &self.kept {
            Kept::Host(host) => {
                let row = host
                    .get(k * vocab..(k + 1) * vocab)
                    .ok_or_else(|| no_row(k))?;
                out.clear();
                out.extend_from_slice(row);
                Ok(())
            }
            Kept::Device(wanted) => {
                let &r = wanted.get(k).ok_or_else(|| no_row(k))?;
                let dev = self
                    .model
                    .logits_device()
                    .ok_or_else(|| host_err("the device logits went away".into()))?;
                *out = download_row(self.model.gpu(), dev, r, vocab).map_err(backend)?;
                Ok(())
            }
            Kept::Nothing => Err(no_row(k)),
        }
    }

    /// The logits of `ids` in wanted row `k` of the latest candidate round.
    pub(super) fn kept_logits(
        &mut self,
        k: usize,
        ids: &[u32],
        out: &mut Vec<f32>,
    ) -> ModelResult<()> {
        let vocab = self.info.vocab_size;
        if let Some(&id) = ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(ModelError::TokenOutOfRange { token: id, vocab });
        }
        match &self.kept {
            Kept::Host(host) => {
                let row = host
                    .get(k * vocab..(k + 1) * vocab)
                    .ok_or_else(|| no_row(k))?;
                out.clear();
                out.extend(ids.iter().map(|&i| row[i as usize]));
                Ok(())
            }
            Kept::Device(wanted) => {
                let &r = wanted.get(k).ok_or_else(|| no_row(k))?;
                let at: Vec<(usize, u32)> = ids.iter().map(|&i| (r, i)).collect();
                let dev = self
                    .model
                    .logits_device()
                    .ok_or_else(|| host_err("the device logits went away".into()))?;
                *out = gather(self.model.gpu(), dev, vocab, &at).map_err(backend)?;
                Ok(())
            }
            Kept::Nothing => Err(no_row(k)),
        }
    }
}

fn no_row(k: usize) -> ModelError {
    host_err(format!("no wanted row {k} in the latest candidate round"))
}

/// Row `r` of the device logits (`vocab` floats), copied down.
fn download_row(
    gpu: &crate::device::Gpu,
    dev: &cudarc::driver::CudaSlice<f32>,
    r: usize,
    vocab: usize,
) -> crate::error::Result<Vec<f32>> {
    let (a, b) = (r * vocab, (r + 1) * vocab);
    if b > dev.len() {
        return Err(crate::error::CudaError::Shape {
            op: "logits row download",
            detail: format!("row {r} of {vocab} past a buffer of {}", dev.len()),
        });
    }
    let mut out = vec![0f32; vocab];
    gpu.stream()
        .memcpy_dtoh(&dev.slice(a..b), &mut out)
        .map_err(crate::error::drv("copying a logits row from the device"))?;
    gpu.synchronize()?;
    Ok(out)
}
