//! Fuzz target: the safetensors header parser on arbitrary bytes (a whole file image).
//! It must never panic, and whatever it accepts must satisfy the layout invariants.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tf_formats::safetensors::parse_header;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = parse_header(data) else {
        return;
    };
    assert_eq!(header.data_start + header.data_len, data.len() as u64);
    let mut covered = 0u64;
    for t in &header.tensors {
        let range = t.file_range(header.data_start);
        assert!(range.end <= data.len());
        let elements: u64 = t.shape.iter().product();
        assert_eq!(
            (range.end - range.start) as u64,
            elements * t.dtype.size() as u64
        );
        assert_eq!(
            t.data_offsets.0, covered,
            "tensors must tile the data section"
        );
        covered = t.data_offsets.1;
    }
    assert_eq!(covered, header.data_len);
});
