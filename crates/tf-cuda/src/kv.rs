//! The device KV cache: f32 keys and values for a fixed number of stream slots.

use crate::device::Gpu;
use crate::error::{drv, CudaError, Result};
use cudarc::driver::CudaSlice;

/// Keys and values of `slots` streams, laid out `[slot][layer][pos][kv_heads * head_dim]` in two
/// pools allocated once (exact f32, never compressed).
pub struct GpuKv {
    /// Key pool.
    pub(crate) k: CudaSlice<f32>,
    /// Value pool.
    pub(crate) v: CudaSlice<f32>,
    slots: usize,
    layers: usize,
    capacity: usize,
    row_w: usize,
    kv_heads: usize,
}

impl GpuKv {
    /// Allocates the pools for `slots` streams of up to `capacity` positions each.
    pub fn new(
        gpu: &Gpu,
        slots: usize,
        layers: usize,
        capacity: usize,
        kv_heads: usize,
        head_dim: usize,
    ) -> Result<GpuKv> {
        let row_w = kv_heads * head_dim;
        let len = slots
            .checked_mul(layers)
            .and_then(|x| x.checked_mul(capacity))
            .and_then(|x| x.checked_mul(row_w))
            .ok_or_else(|| CudaError::Shape {
                op: "kv cache",
                detail: format!(
                    "{slots} slots x {layers} layers x {capacity} positions x {row_w} overflows"
                ),
            })?;
        if capacity > i32::MAX as usize || slots > i32::MAX as usize {
            return Err(CudaError::Shape {
                op: "kv cache",
                detail: format!("capacity {capacity} or slots {slots} exceeds i32 indexing"),
            });
        }
        Ok(GpuKv {
            k: gpu.zeros(len)?,
            v: gpu.zeros(len)?,
            slots,
            layers,
            capacity,
            row_w,
            kv_heads,
        })
    }

    /// Stream slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Layers per slot.
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// Positions per slot.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Key/value heads per position.
    pub fn kv_heads(&self) -> usize {
        self.kv_heads
    }

    /// Floats per position (`kv_heads * head_dim`).
    pub fn row_width(&self) -> usize {
        self.row_w
    }

    /// Device bytes of both pools.
    pub fn bytes(&self) -> usize {
        2 * self.k.len() * 4
    }

    /// Checks that every (slot, position) pair is inside the pools.
    pub fn check_rows(&self, slots: &[i32], pos: &[i32]) -> Result<()> {
        for (&s, &p) in slots.iter().zip(pos) {
            if s < 0 || s as usize >= self.slots {
                return Err(CudaError::Param {
                    op: "kv cache",
                    what: "slot",
                    value: s as f64,
                    why: "outside the allocated slots",
                });
            }
            if p < 0 || p as usize >= self.capacity {
                return Err(CudaError::Param {
                    op: "kv cache",
                    what: "position",
                    value: p as f64,
                    why: "outside the slot's capacity",
                });
            }
        }
        Ok(())
    }
}

impl GpuKv {
    fn span(&self, slot: usize, layer: usize, len: usize) -> Result<std::ops::Range<usize>> {
        if slot >= self.slots || layer >= self.layers || len > self.capacity {
            return Err(CudaError::Shape {
                op: "kv cache copy",
                detail: format!(
                    "slot {slot} layer {layer} len {len} outside {} slots x {} layers x {} positions",
                    self.slots, self.layers, self.capacity
                ),
            });
        }
        let start = ((slot * self.layers + layer) * self.capacity) * self.row_w;
        Ok(start..start + len * self.row_w)
    }

    /// Writes `layer` of `slot` from position 0: `k` and `v` hold whole positions
    /// (`row_width` floats each), position-major.
    pub fn write_layer(
        &mut self,
        gpu: &Gpu,
        slot: usize,
        layer: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<()> {
        let len = k.len() / self.row_w.max(1);
        if k.len() != v.len() || k.len() != len * self.row_w {
            return Err(CudaError::Shape {
                op: "kv cache copy",
                detail: format!(
                    "{} keys and {} values for rows of {}",
                    k.len(),
                    v.len(),
                    self.row_w
                ),
            });
        }
        let r = self.span(slot, layer, len)?;
        if len == 0 {
            return Ok(());
        }
        let s = gpu.stream();
        s.memcpy_htod(k, &mut self.k.slice_mut(r.clone()))
            .map_err(drv("copying keys to the device"))?;
        s.memcpy_htod(v, &mut self.v.slice_mut(r))
            .map_err(drv("copying values to the device"))
    }

    /// The keys and values of `layer` of `slot` at positions `0..len` (synchronizes).
    pub fn read_layer(
        &self,
        gpu: &Gpu,
        slot: usize,
        layer: usize,
        len: usize,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let r = self.span(slot, layer, len)?;
        let (mut k, mut v) = (vec![0.0; r.len()], vec![0.0; r.len()]);
        if !r.is_empty() {
            let s = gpu.stream();
            s.memcpy_dtoh(&self.k.slice(r.clone()), &mut k)
                .map_err(drv("copying keys from the device"))?;
            s.memcpy_dtoh(&self.v.slice(r), &mut v)
                .map_err(drv("copying values from the device"))?;
            gpu.synchronize()?;
        }
        Ok((k, v))
    }
}
