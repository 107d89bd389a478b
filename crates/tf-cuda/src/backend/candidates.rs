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

use super::{backend, host_err, CudaModel, SlotForward, GRAPH_ROWS};
use crate::graphs::download_rows;
use crate::select::{gather, select, GpuCandidates, SELECT_CAP};
use tf_models::{ModelError, Row, RowCandidates, RowWant, StreamState};

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

    /// One round whose wanted rows come back as candidates, with what `wants[k]` asks of
    /// wanted row k besides: the logits of some ids, or the whole row (then not selected).
    pub(super) fn select_round(
        &mut self,
        rows: &[Row],
        states: &mut [&mut StreamState],
        wants: &[RowWant],
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
        let none = RowWant::default();
        let want = |k: usize| wants.get(k).unwrap_or(&none);
        if let Some(&id) = wants
            .iter()
            .flat_map(|w| &w.extra)
            .find(|&&i| i as usize >= vocab)
        {
            return Err(ModelError::TokenOutOfRange { token: id, vocab });
        }
        if rows.is_empty() {
            self.kept = Kept::Device(Vec::new());
            return Ok(());
        }
        if rows.len() > self.model.max_rows() {
            let mut host = Vec::new();
            self.forward(rows, states, &mut host)?;
            for (k, r) in host.chunks(vocab).enumerate() {
                let mut c = if want(k).whole {
                    whole_row(r)
                } else {
                    RowCandidates::of_row(r, SELECT_CAP)
                };
                c.extra = want(k).extra.iter().map(|&i| (i, r[i as usize])).collect();
                out.push(c);
            }
            self.kept = Kept::Host(host);
            return Ok(());
        }
        self.prepare(rows, states)?;
        let wanted: Vec<usize> = (0..self.rows.len())
            .filter(|&i| self.rows[i].logits)
            .collect();
        // No row asks the model for logits: they are read on the device.
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
        let gpu = self.model.gpu();
        let dev = device_logits(self.model.as_ref())?;
        // Rows carried whole: one copy per run of consecutive buffer rows.
        let whole: Vec<usize> = (0..wanted.len()).filter(|&k| want(k).whole).collect();
        let mut whole_rows = download_rows(
            gpu,
            dev,
            &whole.iter().map(|&k| wanted[k]).collect::<Vec<_>>(),
            vocab,
        )
        .map_err(backend)?
        .into_iter();
        // The other rows are selected on the device.
        let picked: Vec<usize> = (0..wanted.len()).filter(|&k| !want(k).whole).collect();
        let mut selected = Vec::new().into_iter();
        if !picked.is_empty() {
            let mut cands = match self.cands.take() {
                Some(c) if c.rows() >= picked.len() => c,
                _ => GpuCandidates::new(gpu, self.model.max_rows(), SELECT_CAP).map_err(backend)?,
            };
            let at: Vec<usize> = picked.iter().map(|&k| wanted[k]).collect();
            let got = select(gpu, dev, &at, vocab, &mut cands)
                .and_then(|()| cands.download(gpu, at.len()));
            self.cands = Some(cands);
            selected = got.map_err(backend)?.into_iter();
        }
        // Every row's extra logits in one gather.
        let at: Vec<(usize, u32)> = (0..wanted.len())
            .flat_map(|k| {
                let r = wanted[k];
                want(k).extra.iter().map(move |&i| (r, i))
            })
            .collect();
        let mut vals = gather(gpu, dev, vocab, &at).map_err(backend)?.into_iter();
        for k in 0..wanted.len() {
            let next = if want(k).whole {
                whole_rows.next().map(whole_row_owned)
            } else {
                selected.next()
            };
            let mut c = next.ok_or_else(|| no_row(k))?;
            c.extra = want(k)
                .extra
                .iter()
                .map(|&i| (i, vals.next().unwrap_or(f32::NAN)))
                .collect();
            out.push(c);
        }
        self.kept = Kept::Device(wanted);
        Ok(())
    }

    /// The whole row of wanted row `k` of the latest candidate round.
    pub(super) fn kept_row(&mut self, k: usize, out: &mut Vec<f32>) -> ModelResult<()> {
        *out = match self.kept_at(k)? {
            RowAt::Host(row) => row.to_vec(),
            RowAt::Device(r) => download_rows(
                self.model.gpu(),
                device_logits(self.model.as_ref())?,
                &[r],
                self.info.vocab_size,
            )
            .map_err(backend)?
            .pop()
            .ok_or_else(|| no_row(k))?,
        };
        Ok(())
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
        *out = match self.kept_at(k)? {
            RowAt::Host(row) => ids.iter().map(|&i| row[i as usize]).collect(),
            RowAt::Device(r) => {
                let at: Vec<(usize, u32)> = ids.iter().map(|&i| (r, i)).collect();
                gather(
                    self.model.gpu(),
                    device_logits(self.model.as_ref())?,
                    vocab,
                    &at,
                )
                .map_err(backend)?
            }
        };
        Ok(())
    }

    /// Where wanted row `k` of the latest candidate round is.
    fn kept_at(&self, k: usize) -> ModelResult<RowAt<'_>> {
        let vocab = self.info.vocab_size;
        match &self.kept {
            Kept::Host(host) => host
                .get(k * vocab..(k + 1) * vocab)
                .map(RowAt::Host)
                .ok_or_else(|| no_row(k)),
            Kept::Device(wanted) => wanted
                .get(k)
                .map(|&r| RowAt::Device(r))
                .ok_or_else(|| no_row(k)),
            Kept::Nothing => Err(no_row(k)),
        }
    }
}

/// The GPU model's device logits (the latest round's).
fn device_logits(model: &dyn SlotForward) -> ModelResult<&cudarc::driver::CudaSlice<f32>> {
    model
        .logits_device()
        .ok_or_else(|| host_err("the device logits went away".into()))
}

/// Where a kept row is: a host row, or a row of the device logits buffer.
enum RowAt<'a> {
    Host(&'a [f32]),
    Device(usize),
}

/// A row carried whole: no candidates selected (an empty leading run, which decides nothing
/// unless every logit is NaN), its non-NaN count, the row itself.
fn whole_row(r: &[f32]) -> RowCandidates {
    whole_row_owned(r.to_vec())
}

fn whole_row_owned(r: Vec<f32>) -> RowCandidates {
    RowCandidates {
        top: Vec::new(),
        non_nan: r.iter().filter(|x| !x.is_nan()).count(),
        extra: Vec::new(),
        whole: r,
    }
}

fn no_row(k: usize) -> ModelError {
    host_err(format!("no wanted row {k} in the latest candidate round"))
}
