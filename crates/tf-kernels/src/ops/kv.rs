//! Per-stream KV cache: f32 keys and values, `[pos][kv_head][head_dim]`, exact (never lossy).

use super::error::{check_len, OpError};

/// One attention layer's keys and values for one stream.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerKv {
    n_kv_heads: usize,
    head_dim: usize,
    len: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl LayerKv {
    /// An empty layer cache for `n_kv_heads` heads of `head_dim` elements.
    pub fn new(n_kv_heads: usize, head_dim: usize) -> Result<LayerKv, OpError> {
        LayerKv::with_capacity(n_kv_heads, head_dim, 0)
    }

    /// An empty layer cache with room for `positions` positions before it reallocates.
    pub fn with_capacity(
        n_kv_heads: usize,
        head_dim: usize,
        positions: usize,
    ) -> Result<LayerKv, OpError> {
        if n_kv_heads == 0 || head_dim == 0 {
            return Err(OpError::Shape {
                op: "kv_cache",
                detail: format!("n_kv_heads {n_kv_heads} and head_dim {head_dim} must be > 0"),
            });
        }
        let w = n_kv_heads * head_dim;
        Ok(LayerKv {
            n_kv_heads,
            head_dim,
            len: 0,
            k: Vec::with_capacity(positions * w),
            v: Vec::with_capacity(positions * w),
        })
    }

    /// Number of KV heads.
    pub fn n_kv_heads(&self) -> usize {
        self.n_kv_heads
    }

    /// Elements per head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Elements per position (`n_kv_heads * head_dim`).
    pub fn row_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Cached positions (keys 0..len).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no position is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions that fit without reallocating.
    pub fn capacity(&self) -> usize {
        self.k.capacity().min(self.v.capacity()) / self.row_width()
    }

    /// Makes room for `additional` more positions (amortised growth, as `Vec::reserve`).
    pub fn reserve(&mut self, additional: usize) {
        let extra = additional * self.row_width();
        self.k.reserve(extra);
        self.v.reserve(extra);
    }

    /// Appends `n` positions: `k` and `v` hold `n * row_width` elements each, position-major.
    pub fn append(&mut self, k: &[f32], v: &[f32]) -> Result<(), OpError> {
        let w = self.row_width();
        if !k.len().is_multiple_of(w) {
            return Err(OpError::Shape {
                op: "kv_cache.append",
                detail: format!(
                    "k has {} elements, not a multiple of row width {w}",
                    k.len()
                ),
            });
        }
        check_len("kv_cache.append", "v", k.len(), v.len())?;
        self.k.extend_from_slice(k);
        self.v.extend_from_slice(v);
        self.len += k.len() / w;
        Ok(())
    }

    /// Drops positions `len..` (draft rollback); capacity is kept. No-op if already shorter.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            let w = self.row_width();
            self.k.truncate(len * w);
            self.v.truncate(len * w);
            self.len = len;
        }
    }

    /// Key of `kv_head` at position `pos` (`head_dim` elements); `None` past the end.
    pub fn key(&self, pos: usize, kv_head: usize) -> Option<&[f32]> {
        self.slot(pos, kv_head)
            .map(|o| &self.k[o..o + self.head_dim])
    }

    /// Value of `kv_head` at position `pos` (`head_dim` elements); `None` past the end.
    pub fn value(&self, pos: usize, kv_head: usize) -> Option<&[f32]> {
        self.slot(pos, kv_head)
            .map(|o| &self.v[o..o + self.head_dim])
    }

    fn slot(&self, pos: usize, kv_head: usize) -> Option<usize> {
        (pos < self.len && kv_head < self.n_kv_heads)
            .then(|| (pos * self.n_kv_heads + kv_head) * self.head_dim)
    }

    /// All cached keys, `[pos][kv_head][head_dim]`.
    pub fn keys(&self) -> &[f32] {
        &self.k
    }

    /// All cached values, `[pos][kv_head][head_dim]`.
    pub fn values(&self) -> &[f32] {
        &self.v
    }

    /// Bytes held by the cached positions (keys and values).
    pub fn bytes(&self) -> usize {
        2 * self.len * self.row_width() * std::mem::size_of::<f32>()
    }
}

/// One stream's KV caches, one [`LayerKv`] per attention layer.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct KvCache {
    layers: Vec<LayerKv>,
}

impl KvCache {
    /// `n_layers` empty layers of the same shape.
    pub fn new(n_layers: usize, n_kv_heads: usize, head_dim: usize) -> Result<KvCache, OpError> {
        let layers = (0..n_layers)
            .map(|_| LayerKv::new(n_kv_heads, head_dim))
            .collect::<Result<_, _>>()?;
        Ok(KvCache { layers })
    }

    /// A cache from layers of possibly different shapes (hybrid families).
    pub fn from_layers(layers: Vec<LayerKv>) -> KvCache {
        KvCache { layers }
    }

    /// Number of layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Layer `i`.
    pub fn layer(&self, i: usize) -> Option<&LayerKv> {
        self.layers.get(i)
    }

    /// Layer `i`, mutable.
    pub fn layer_mut(&mut self, i: usize) -> Option<&mut LayerKv> {
        self.layers.get_mut(i)
    }

    /// Truncates every layer to `len` positions.
    pub fn truncate(&mut self, len: usize) {
        for l in &mut self.layers {
            l.truncate(len);
        }
    }

    /// Reserves room for `additional` positions in every layer.
    pub fn reserve(&mut self, additional: usize) {
        for l in &mut self.layers {
            l.reserve(additional);
        }
    }

    /// Bytes held by all layers' cached positions.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(LayerKv::bytes).sum()
    }
}
