//! The tensor index a family validates against: lookups by name that check shape and format,
//! and a record of which tensors were claimed (so nothing is silently ignored).

use crate::formats::{check_format, Role};
use crate::refusal::Refusal;
use serde::Serialize;
use std::collections::BTreeMap;
use tf_formats::TensorEntry;

/// What part of the model a tensor belongs to (for summaries and format reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum TensorClass {
    /// Token embedding table.
    Embedding,
    /// Attention projections (and their biases).
    Attention,
    /// Mamba2 mixer matrices and parameters (except its norm).
    Mamba,
    /// Dense feed-forward matrices.
    Mlp,
    /// Shared experts of a MoE layer (always active).
    SharedExperts,
    /// Routed experts of a MoE layer (top-k of them active per token).
    RoutedExperts,
    /// MoE latent or pre/post expert projections (always active).
    ExpertProjection,
    /// Router weights and score biases.
    Router,
    /// Norm gains and residual-gate coefficients.
    Norm,
    /// Output head (lm_head).
    Head,
}

impl TensorClass {
    /// A short lowercase label ("embedding", "routed-experts", ...).
    pub fn label(self) -> &'static str {
        match self {
            TensorClass::Embedding => "embedding",
            TensorClass::Attention => "attention",
            TensorClass::Mamba => "mamba",
            TensorClass::Mlp => "mlp",
            TensorClass::SharedExperts => "shared-experts",
            TensorClass::RoutedExperts => "routed-experts",
            TensorClass::ExpertProjection => "expert-projections",
            TensorClass::Router => "router",
            TensorClass::Norm => "norms",
            TensorClass::Head => "head",
        }
    }
}

/// One tensor a plan uses, with its class and layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Claim {
    /// The tensor as indexed.
    pub entry: TensorEntry,
    /// What it is.
    pub class: TensorClass,
    /// Its layer, or `None` for embedding, final norm and head.
    pub layer: Option<usize>,
}

/// Name-keyed view of a checkpoint's tensors while a family plans.
pub(crate) struct Index<'a> {
    map: BTreeMap<&'a str, &'a TensorEntry>,
    claimed: BTreeMap<String, ()>,
    claims: Vec<Claim>,
    ignored: Vec<String>,
}

impl<'a> Index<'a> {
    /// Indexes entries by name (the first of any duplicate wins).
    pub fn new(tensors: &'a [TensorEntry]) -> Index<'a> {
        let mut map = BTreeMap::new();
        for t in tensors {
            map.entry(t.name.as_str()).or_insert(t);
        }
        Index {
            map,
            claimed: BTreeMap::new(),
            claims: Vec::new(),
            ignored: Vec::new(),
        }
    }

    /// Whether a tensor of this name exists.
    pub fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// The entry of this name, unchecked.
    pub fn lookup(&self, name: &str) -> Option<&'a TensorEntry> {
        self.map.get(name).copied()
    }

    /// Whether any tensor name satisfies `pred`.
    pub fn any(&self, pred: impl Fn(&str) -> bool) -> bool {
        self.map.keys().any(|k| pred(k))
    }

    /// Requires a tensor of this name, shape and role; claims it.
    pub fn require(
        &mut self,
        name: &str,
        shape: &[u64],
        role: Role,
        class: TensorClass,
        layer: Option<usize>,
    ) -> Result<TensorEntry, Refusal> {
        let entry = self
            .lookup(name)
            .ok_or_else(|| Refusal::MissingTensor { name: name.into() })?;
        if entry.shape != shape {
            return Err(Refusal::ShapeMismatch {
                name: name.into(),
                expected: shape.to_vec(),
                found: entry.shape.clone(),
            });
        }
        check_format(entry, role)?;
        self.claim(entry, class, layer);
        Ok(entry.clone())
    }

    /// Records a tensor as used without checking it further.
    pub fn claim(&mut self, entry: &TensorEntry, class: TensorClass, layer: Option<usize>) {
        if self.claimed.insert(entry.name.clone(), ()).is_none() {
            self.claims.push(Claim {
                entry: entry.clone(),
                class,
                layer,
            });
        }
    }

    /// Marks every unclaimed tensor matching `pred` as knowingly ignored.
    pub fn ignore_where(&mut self, pred: impl Fn(&str) -> bool) {
        for name in self.map.keys() {
            if !self.claimed.contains_key(*name) && pred(name) {
                self.claimed.insert((*name).to_string(), ());
                self.ignored.push((*name).to_string());
            }
        }
    }

    /// Ends planning: refuses the first tensor nobody claimed or ignored.
    pub fn finish(self) -> Result<(Vec<Claim>, Vec<String>), Refusal> {
        if let Some(name) = self.map.keys().find(|n| !self.claimed.contains_key(**n)) {
            return Err(Refusal::UnexpectedTensor {
                name: (*name).to_string(),
            });
        }
        Ok((self.claims, self.ignored))
    }
}
