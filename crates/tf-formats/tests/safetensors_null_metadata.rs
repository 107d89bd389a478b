//! `"__metadata__": null` (what mx.save_safetensors writes without metadata) reads as empty;
//! a metadata value of another non-object type is still refused.

use tf_formats::safetensors::parse_header;

fn file(metadata: &str) -> Vec<u8> {
    let header = format!(
        r#"{{"__metadata__":{metadata},"w":{{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}}}"#
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&[0u8; 8]);
    bytes
}

#[test]
fn null_metadata_is_empty() {
    let h = parse_header(&file("null")).expect("null metadata parses");
    assert!(h.metadata.is_empty());
    assert_eq!(h.tensors.len(), 1);
}

#[test]
fn non_object_metadata_is_refused() {
    assert!(parse_header(&file("[1]")).is_err());
}
