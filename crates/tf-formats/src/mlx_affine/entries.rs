//! Grouping an MLX checkpoint's `X.weight` + `X.scales` + `X.biases` into logical entries.

use super::{MlxError, QuantizationConfig};
use crate::dtype::DType;
use crate::safetensors::SafeTensorInfo;
use crate::weight::{TensorEntry, WeightFormat};
use std::collections::{HashMap, HashSet};

/// One logical entry per weight: each module with `X.scales` becomes a single
/// `WeightFormat::MlxAffine` entry named `X.weight` with logical shape `[.., out, in]`
/// (`in = packed_cols * 32 / bits`); every other tensor becomes a `Dense` entry.
///
/// As in mlx-lm, a module is quantized exactly when `X.scales` exists; its spec comes from
/// `qcfg` (override or default). Entries keep the order of `tensors`.
pub fn logical_entries(
    tensors: &[SafeTensorInfo],
    qcfg: Option<&QuantizationConfig>,
) -> Result<Vec<TensorEntry>, MlxError> {
    let by_name: HashMap<&str, &SafeTensorInfo> =
        tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut consumed: HashSet<&str> = HashSet::new();
    let mut quantized: HashMap<&str, TensorEntry> = HashMap::new();
    for t in tensors {
        let Some(module) = t.name.strip_suffix(".scales") else {
            continue;
        };
        let weight_name = format!("{module}.weight");
        let biases_name = format!("{module}.biases");
        let weight = by_name
            .get(weight_name.as_str())
            .ok_or_else(|| MlxError::MissingWeight {
                module: module.to_string(),
            })?;
        let biases = by_name
            .get(biases_name.as_str())
            .ok_or_else(|| MlxError::MissingBiases {
                module: module.to_string(),
            })?;
        let qcfg = qcfg.ok_or_else(|| MlxError::MissingQuantizationConfig {
            tensor: weight_name.clone(),
        })?;
        let spec = qcfg
            .spec_for(module)
            .ok_or_else(|| MlxError::QuantizationDisabled {
                module: module.to_string(),
            })?;
        let entry = quantized_entry(module, weight, t, biases, spec)?;
        consumed.insert(t.name.as_str());
        consumed.insert(biases.name.as_str());
        quantized.insert(weight.name.as_str(), entry);
    }
    let mut out = Vec::with_capacity(tensors.len() - consumed.len());
    for t in tensors {
        if consumed.contains(t.name.as_str()) {
            continue;
        }
        match quantized.remove(t.name.as_str()) {
            Some(entry) => out.push(entry),
            None => out.push(TensorEntry {
                name: t.name.clone(),
                format: WeightFormat::Dense(t.dtype),
                shape: t.shape.clone(),
            }),
        }
    }
    Ok(out)
}

fn quantized_entry(
    module: &str,
    weight: &SafeTensorInfo,
    scales: &SafeTensorInfo,
    biases: &SafeTensorInfo,
    spec: super::QuantSpec,
) -> Result<TensorEntry, MlxError> {
    if weight.dtype != DType::U32 {
        return Err(MlxError::PackedNotU32 {
            tensor: weight.name.clone(),
            dtype: weight.dtype,
        });
    }
    if !matches!(scales.dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(MlxError::ParamDtype {
            what: "scales",
            dtype: scales.dtype,
        });
    }
    if biases.dtype != scales.dtype {
        return Err(MlxError::ParamDtypeMismatch {
            scales: scales.dtype,
            biases: biases.dtype,
        });
    }
    let shape_err = || MlxError::PackedShapeInvalid {
        tensor: weight.name.clone(),
        shape: weight.shape.clone(),
        bits: spec.bits,
        group_size: spec.group_size,
    };
    let (&packed_cols, outer) = weight
        .shape
        .split_last()
        .filter(|(_, o)| !o.is_empty())
        .ok_or_else(shape_err)?;
    let cols = spec.logical_cols(packed_cols).ok_or_else(shape_err)?;
    if cols == 0 || cols % spec.group_size as u64 != 0 {
        return Err(shape_err());
    }
    let mut expected = outer.to_vec();
    expected.push(cols / spec.group_size as u64);
    for (what, t) in [("scales", scales), ("biases", biases)] {
        if t.shape != expected {
            return Err(MlxError::ParamShapeMismatch {
                module: module.to_string(),
                what,
                expected: expected.clone(),
                found: t.shape.clone(),
            });
        }
    }
    let mut shape = outer.to_vec();
    shape.push(cols);
    Ok(TensorEntry {
        name: weight.name.clone(),
        format: WeightFormat::MlxAffine {
            bits: spec.bits,
            group_size: spec.group_size,
            scales: scales.dtype,
        },
        shape,
    })
}
