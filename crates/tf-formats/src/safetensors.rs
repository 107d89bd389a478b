//! safetensors files, single or sharded through model.safetensors.index.json.
