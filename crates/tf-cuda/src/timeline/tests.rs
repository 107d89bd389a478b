use super::*;

fn stamp(name: &str, before_ns: u64, after_ns: u64) -> Stamp {
    Stamp {
        name: name.into(),
        before_ns,
        after_ns,
    }
}

/// The bytes of records as the program lays out `TfStamp` (two u64, then the name and zeros).
fn records(stamps: &[Stamp]) -> Vec<u8> {
    let mut b = Vec::new();
    for s in stamps {
        b.extend(s.before_ns.to_le_bytes());
        b.extend(s.after_ns.to_le_bytes());
        let mut name = [0u8; NAME];
        name[..s.name.len()].copy_from_slice(s.name.as_bytes());
        b.extend(name);
    }
    b
}

#[test]
fn records_parse_back_sorted_by_release() {
    let long = "k".repeat(NAME - 1);
    let stamps = [
        stamp("b", 500, 2_000),
        stamp("a", 0, 1_000),
        stamp(&long, 10, 3_000),
    ];
    let parsed = parse(&records(&stamps));
    assert_eq!(
        parsed,
        vec![stamps[1].clone(), stamps[0].clone(), stamps[2].clone()]
    );
}

#[test]
fn records_kept_for_phases_never_marked_are_left_out() {
    let stamps = [
        stamp("k", 0, 1_000),
        stamp("", 0, 0),
        stamp("~phase", 1_500, 1_500),
    ];
    let parsed = parse(&records(&stamps));
    assert_eq!(parsed, vec![stamps[0].clone(), stamps[2].clone()]);
}

#[test]
fn the_table_gives_each_kernel_its_release_to_the_next() {
    // Two steps of norm -> product -> norm, a prefetch beside; times in ns.
    let step = |o: u64| {
        vec![
            stamp("norm", o, o + 1_000),
            stamp("tf_l2_prefetch", o + 1_100, o + 1_200),
            stamp("product", o + 900, o + 4_000),
            stamp("norm", o + 4_500, o + 5_000),
        ]
    };
    let t = table(&[step(0), step(100_000)]);
    // The span: 0 to 5,000 ns. The first norm holds the path from its release to the
    // product's (3,000 ns), the product to the last norm's (1,000); the last holds none.
    assert!(
        t.contains("2 step(s); span 5.0 us a step; 1 launches beside"),
        "{t}"
    );
    assert!(
        t.contains("| norm | 2 | 3.0 | 60.0% | 3.00 | 0.75 | 0.50 |"),
        "{t}"
    );
    assert!(
        t.contains("| product | 1 | 1.0 | 20.0% | 1.00 | 3.10 | -0.10 |"),
        "{t}"
    );
    assert!(!t.contains("| tf_l2_prefetch"), "{t}");
}

#[test]
fn the_csv_counts_from_the_steps_first_stamp() {
    let c = csv(&[stamp("a", 2_000, 3_500), stamp("b", 3_000, 4_000)]);
    assert_eq!(
        c,
        "kernel,before_us,after_us\na,0.000,1.500\nb,1.000,2.000\n"
    );
}
