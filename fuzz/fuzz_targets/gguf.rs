//! Fuzzes the GGUF parser: any bytes must give Ok or a named error, never a panic, an
//! out-of-bounds read or an allocation larger than the input justifies. On success, every
//! accessor is exercised and each tensor whose data is small is dequantized.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tf_formats::gguf::{dequantize, has_dequantizer, GgufFile};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let file_len = f.as_bytes().len() as u64;
    assert!(f.data_start() % f.alignment() == 0);
    for (key, _) in f.metadata() {
        assert!(f.get(key).is_some());
    }
    for t in f.tensors() {
        assert!(t.offset + t.n_bytes <= file_len);
        assert!(t.offset % f.alignment() == 0);
        let bytes = f.tensor_data(t);
        assert_eq!(bytes.len() as u64, t.n_bytes);
        assert!(f.tensor(&t.name).is_some());
        let n = t.n_elements();
        if has_dequantizer(t.ty) && n <= 1 << 16 {
            let y = dequantize(t.ty, bytes, n as usize).expect("validated tensor dequantizes");
            assert_eq!(y.len() as u64, n);
        }
    }
});
