//! The scheduler sampling from candidates (a model's `forward_candidates`, as the CUDA backend
//! provides it) gives the same tokens and logprobs as sampling whole rows: greedy, top-k,
//! min-p, penalties that lower and raise logits, top-p and plain temperature (refused by the
//! candidates, so read from the whole row), logprob requests, concurrent streams and verified
//! drafts, on the default model; with a capacity of 256 and of 1 (more whole-row reads). A
//! planted control (each row handed the next row's candidates) must change some stream. The
//! same for one-stream `generate`, with its own planted control (the best candidate left out).

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use tf_engine::sampler::SamplingParams;
use tf_engine::scheduler::{Scheduler, SchedulerConfig, StreamEvent, StreamRequest, TokenEvent};
use tf_models::{
    DraftHead, Model, ModelError, ModelInfo, Row, RowCandidates, RowWant, StreamState,
};

use tf_testkit::default_model;

/// Counts of what the scheduler asked a selecting model for.
#[derive(Default)]
struct Stats {
    /// Rows handed over as candidates.
    rows: AtomicUsize,
    /// Whole rows read back.
    whole: AtomicUsize,
    /// Penalised-logit reads after the round (the round's `extra` carries them all).
    gathers: AtomicUsize,
    /// Logits carried as `extra`.
    extra: AtomicUsize,
    /// Whole rows carried with the round.
    carried_whole: AtomicUsize,
}

/// A host model with a candidate selection: its rows' `cap` largest logits, the whole rows kept
/// for `candidate_row` (what the CUDA backend does with device rows).
struct Selecting {
    inner: Box<dyn Model>,
    cap: usize,
    /// Planted control: wanted row k gets the candidates of wanted row k + 1 (a row-indexing
    /// slip), when the round has several.
    plant_other_row: bool,
    /// Planted control: every row's best candidate left out.
    plant_drop_best: bool,
    last: Vec<f32>,
    stats: Arc<Stats>,
}

impl Selecting {
    fn row(&self, k: usize) -> Result<&[f32], ModelError> {
        let v = self.inner.info().vocab_size;
        self.last
            .get(k * v..(k + 1) * v)
            .ok_or(ModelError::Backend {
                backend: "test",
                message: format!("no wanted row {k}"),
            })
    }
}

impl Model for Selecting {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    fn new_state(&self) -> StreamState {
        self.inner.new_state()
    }
    fn forward(
        &mut self,
        rows: &[Row],
        states: &mut [&mut StreamState],
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        self.inner.forward(rows, states, logits)
    }
    fn host_copy(&mut self, state: &StreamState) -> Result<StreamState, ModelError> {
        self.inner.host_copy(state)
    }
    fn draft_head(&mut self) -> Option<&mut dyn DraftHead> {
        self.inner.draft_head()
    }
    fn candidate_capacity(&self) -> usize {
        self.cap
    }
    fn forward_candidates(
        &mut self,
        rows: &[Row],
        states: &mut [&mut StreamState],
        wants: &[RowWant],
        candidates: &mut Vec<RowCandidates>,
    ) -> Result<(), ModelError> {
        self.inner.forward(rows, states, &mut self.last)?;
        let v = self.inner.info().vocab_size;
        candidates.clear();
        let n = self.last.len() / v.max(1);
        for (k, r) in self.last.chunks(v).enumerate() {
            let mut c = RowCandidates::of_row(r, self.cap);
            if self.plant_other_row {
                let o = (k + 1) % n;
                c.top = RowCandidates::of_row(&self.last[o * v..(o + 1) * v], self.cap).top;
            }
            if self.plant_drop_best && !c.top.is_empty() {
                c.top.remove(0);
            }
            let want = wants.get(k).cloned().unwrap_or_default();
            c.extra = want.extra.iter().map(|&i| (i, r[i as usize])).collect();
            self.stats.extra.fetch_add(want.extra.len(), Relaxed);
            if want.whole {
                c.whole = r.to_vec();
                self.stats.carried_whole.fetch_add(1, Relaxed);
            }
            candidates.push(c);
        }
        self.stats.rows.fetch_add(candidates.len(), Relaxed);
        Ok(())
    }
    fn candidate_row(&mut self, k: usize, out: &mut Vec<f32>) -> Result<(), ModelError> {
        self.stats.whole.fetch_add(1, Relaxed);
        let row = self.row(k)?.to_vec();
        *out = row;
        Ok(())
    }
    fn candidate_logits(
        &mut self,
        k: usize,
        ids: &[u32],
        out: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        self.stats.gathers.fetch_add(1, Relaxed);
        let row = self.row(k)?;
        let got: Option<Vec<f32>> = ids.iter().map(|&i| row.get(i as usize).copied()).collect();
        *out = got.ok_or(ModelError::Backend {
            backend: "test",
            message: "a penalised id past the vocabulary".into(),
        })?;
        Ok(())
    }
}

/// Tokens each request generates.
const MAX_TOKENS: usize = 10;

/// Requests covering every sampling path.
fn requests(draft: bool) -> Vec<StreamRequest> {
    let p = |temperature, top_k, top_p, min_p, presence, frequency, repetition| SamplingParams {
        temperature,
        top_k,
        top_p,
        min_p,
        presence_penalty: presence,
        frequency_penalty: frequency,
        repetition_penalty: repetition,
        seed: 0,
    };
    let params = [
        p(0.0, 0, 1.0, 0.0, 0.0, 0.0, 1.0),
        p(0.0, 0, 1.0, 0.0, 0.0, 0.3, 1.1),
        p(0.0, 0, 1.0, 0.0, -0.5, 0.0, 0.8),
        p(0.8, 40, 1.0, 0.0, 0.0, 0.0, 1.0),
        p(0.7, 0, 1.0, 0.1, 0.0, 0.0, 1.0),
        p(0.9, 20, 0.9, 0.05, -0.3, 0.2, 1.0),
        p(0.8, 0, 0.9, 0.0, 0.0, 0.0, 1.0),
        p(0.8, 0, 1.0, 0.0, 0.0, 0.0, 1.0),
    ];
    params
        .into_iter()
        .enumerate()
        .map(|(i, mut params)| {
            params.seed = 100 + i as u64;
            StreamRequest {
                prompt: (0..(5 + 11 * i as u32))
                    .map(|t| (t * 97 + 31 * i as u32) % 40000 + 20)
                    .collect(),
                params,
                max_tokens: MAX_TOKENS,
                stop_ids: vec![],
                top_logprobs: (i == 1).then_some(3),
                draft,
            }
        })
        .collect()
}

fn run(model: Box<dyn Model>, draft: bool) -> Vec<Vec<TokenEvent>> {
    let cfg = SchedulerConfig {
        parallel: 4,
        prefill_chunk: 16,
        round_prefill_tokens: 32,
        draft_tokens: if draft { 3 } else { 0 },
        ..Default::default()
    };
    let sched = Scheduler::start(model, cfg).expect("start");
    let rxs: Vec<_> = requests(draft)
        .into_iter()
        .map(|r| {
            let (tx, rx) = mpsc::channel();
            sched.handle().submit(r, Box::new(tx)).expect("submit");
            rx
        })
        .collect();
    rxs.into_iter()
        .map(|rx| {
            let mut events = Vec::new();
            for ev in rx {
                match ev {
                    StreamEvent::Token(t) => events.push(t),
                    StreamEvent::Finished(_) => break,
                    StreamEvent::Failed(e) => panic!("stream failed: {e}"),
                }
            }
            events
        })
        .collect()
}

fn load(path: &std::path::Path) -> Box<dyn Model> {
    tf_models::load(path, &tf_models::LoadOptions { threads: 2 }).expect("load the model")
}

fn selecting(path: &std::path::Path, cap: usize, plant: bool) -> (Box<dyn Model>, Arc<Stats>) {
    let stats = Arc::new(Stats::default());
    let m = Selecting {
        inner: load(path),
        cap,
        plant_other_row: plant,
        plant_drop_best: false,
        last: Vec::new(),
        stats: stats.clone(),
    };
    (Box::new(m), stats)
}

#[test]
fn candidates_give_the_whole_row_tokens_and_logprobs() {
    let Some(path) = default_model() else { return };
    let reference = run(load(&path), false);
    assert!(reference.iter().all(|e| e.len() == MAX_TOKENS));
    for (cap, draft) in [(256, true), (1, false)] {
        let (model, stats) = selecting(&path, cap, false);
        let got = run(model, draft);
        assert_eq!(got, reference, "cap {cap}, drafts {draft}");
        let (rows, whole) = (stats.rows.load(Relaxed), stats.whole.load(Relaxed));
        let carried = stats.carried_whole.load(Relaxed);
        // Every path ran: rows decided by their candidates, whole rows carried with the round
        // (top-p, plain temperature, logprobs, a top-k past the capacity) and whole rows read
        // back after it (undecided: one candidate never decides a greedy draw).
        assert!(
            carried > 0 && carried + whole < rows,
            "cap {cap}: {carried} carried and {whole} read whole of {rows} rows"
        );
        if cap == 1 {
            assert!(whole > 0, "cap 1: no row was read back whole");
        }
        assert!(
            stats.extra.load(Relaxed) > 0,
            "no penalised logits were carried"
        );
        assert_eq!(
            stats.gathers.load(Relaxed),
            0,
            "penalised logits read after the round"
        );
    }
    // Planted control: another row's candidates change some stream.
    let (model, _) = selecting(&path, 256, true);
    assert_ne!(
        run(model, false),
        reference,
        "the planted row slip went unnoticed"
    );
}

/// The tokens `generate` gives for each of the requests' prompts and settings (stop at none).
fn generated(model: &mut dyn Model) -> Vec<Vec<u32>> {
    requests(false)
        .into_iter()
        .map(|r| {
            let req = tf_engine::generate::GenerateRequest {
                prompt: r.prompt,
                params: r.params,
                max_tokens: MAX_TOKENS,
                stop_ids: vec![],
            };
            tf_engine::generate::generate(model, &req, |_| true)
                .expect("generate")
                .generated
        })
        .collect()
}

#[test]
fn generate_from_candidates_gives_the_whole_row_tokens() {
    let Some(path) = default_model() else { return };
    let reference = generated(load(&path).as_mut());
    assert!(reference.iter().all(|g| g.len() == MAX_TOKENS));
    for cap in [256, 1] {
        let (mut model, stats) = selecting(&path, cap, false);
        assert_eq!(generated(model.as_mut()), reference, "cap {cap}");
        // Draws came from candidates, and (cap 1: undecided greedy rows) from rows read back.
        let (rows, whole) = (stats.rows.load(Relaxed), stats.whole.load(Relaxed));
        assert!(
            rows > 0 && stats.extra.load(Relaxed) > 0,
            "cap {cap}: {rows} candidate rows"
        );
        if cap == 1 {
            assert!(whole > 0, "cap 1: no row was read back whole");
        }
    }
    // Planted control: candidates that leave out the row's best logit.
    let mut model = Selecting {
        inner: load(&path),
        cap: 256,
        plant_other_row: false,
        plant_drop_best: true,
        last: Vec::new(),
        stats: Arc::default(),
    };
    assert_ne!(
        generated(&mut model),
        reference,
        "the planted missing candidate went unnoticed"
    );
}
