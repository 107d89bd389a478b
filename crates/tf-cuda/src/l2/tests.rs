//! The prefetch sites' switch, and kernels/l2.cu compiled for the host (no GPU) under the SIMT
//! emulation with its asks recorded, not sent: every byte wanted is asked for once, nothing
//! else, in whole 16-byte units of at most a chunk; the experts' kernel asks only for the
//! experts with rows. Planted kernels (a stride one chunk too long, empty experts asked for)
//! must fail the same checks. Skipped, with a message, without a C++ compiler.

use super::{blocks, Sites};

#[test]
fn sites_parse_unset_all_zero_none_and_lists() {
    let all = Sites {
        within: true,
        experts: true,
        next: true,
    };
    assert_eq!(Sites::parse(None), all);
    let none = Sites {
        within: false,
        experts: false,
        next: false,
    };
    assert_eq!(Sites::parse(Some("0")), none);
    let two = Sites::parse(Some("within, next"));
    assert_eq!(
        two,
        Sites {
            experts: false,
            ..all
        }
    );
}

#[test]
fn pieces_spread_the_bytes_in_whole_units_within_bounds() {
    assert_eq!(super::piece(64 << 20, 132 * 128), 3984);
    assert_eq!(super::piece(1 << 20, 132 * 128), 1 << 10);
    assert_eq!(super::piece(1 << 32, 128), 64 << 10);
}

#[test]
fn blocks_cover_the_pieces_within_the_cap() {
    assert_eq!(blocks(0, 16, 264), 1);
    assert_eq!(blocks(128 * 16, 16, 264), 1);
    assert_eq!(blocks(128 * 16 + 1, 16, 264), 2);
    assert_eq!(blocks(1 << 30, 16 << 10, 264), 264);
}

/// Records each ask (address, bytes) in place of the bulk prefetch; runs one case from argv:
/// `d CHUNK BLOCKS N0 N1 N2 N3` (range i at address (i + 1) << 40) or `e CHUNK UP DOWN
/// OFFSETS...` (up at 1 << 40, down at 2 << 40; three blocks an expert); prints `address
/// bytes` a line.
const HARNESS: &str = r#"
#include <mutex>
static std::mutex tf_asks_mu;
static std::vector<std::pair<unsigned long long, unsigned>> tf_asks;
static inline void tf_l2_ask(const u8* p, u32 bytes) {
    std::lock_guard<std::mutex> g(tf_asks_mu);
    tf_asks.push_back({(unsigned long long)(uintptr_t)p, bytes});
}
"#;

const MAIN: &str = r#"
int main(int argc, char** argv) {
    auto at = [](int i) { return (const u8*)(uintptr_t)((unsigned long long)(i + 1) << 40); };
    const u32 chunk = (u32)std::stoul(argv[2]);
    if (argv[1][0] == 'd') {
        const unsigned blocks = (unsigned)std::stoul(argv[3]);
        u64 n[4];
        for (int i = 0; i < 4; i++) n[i] = std::stoull(argv[4 + i]);
        tf_launch(D3{blocks, 1, 1}, 128, 0, [=] {
            tf_l2_prefetch(at(0), at(1), at(2), at(3), n[0], n[1], n[2], n[3], chunk);
        });
    } else {
        const u64 up = std::stoull(argv[3]), down = std::stoull(argv[4]);
        std::vector<int> off;
        for (int i = 5; i < argc; i++) off.push_back(std::stoi(argv[i]));
        const int* o = off.data();
        tf_launch(D3{(unsigned)off.size() - 1, 3, 1}, 128, 0, [=] {
            tf_moe_l2_prefetch(at(0), at(1), o, up, down, chunk);
        });
    }
    for (auto& a : tf_asks) std::printf("%llu %u\n", a.first, a.second);
    return 0;
}
"#;

fn source(kernels: &str) -> String {
    format!(
        "{}\n{}\n{HARNESS}\n{kernels}\n{MAIN}",
        crate::host_cxx::SIMT_PRELUDE,
        crate::host_cxx::common()
    )
}

/// The asks of one run, as (address, bytes).
fn asks(exe: &std::path::Path, args: &[String]) -> Vec<(u64, u64)> {
    let out = std::process::Command::new(exe)
        .args(args)
        .output()
        .expect("run the harness");
    assert!(out.status.success(), "harness failed: {args:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let mut w = l.split(' ').map(|v| v.parse::<u64>().expect("a number"));
            (w.next().unwrap(), w.next().unwrap())
        })
        .collect()
}

/// Whether `asks` are exactly `want`'s (address, bytes) ranges, each cut into 16-byte-aligned
/// pieces of at most `chunk` bytes, every byte once.
fn covers(mut asks: Vec<(u64, u64)>, want: &[(u64, u64)], chunk: u64) -> Result<(), String> {
    asks.sort_unstable();
    let mut want = want.to_vec();
    want.sort_unstable();
    if let Some(a) = asks
        .iter()
        .find(|&&(p, b)| p % 16 != 0 || b % 16 != 0 || b == 0 || b > chunk)
    {
        return Err(format!("ask {a:?} is not a whole piece of at most {chunk}"));
    }
    let mut pieces = asks.into_iter().peekable();
    for (start, len) in want.into_iter().filter(|w| w.1 > 0) {
        let mut at = start;
        while at < start + len {
            match pieces.next() {
                Some((p, b)) if p == at => at += b,
                other => return Err(format!("at {at:#x} the next ask is {other:?}")),
            }
        }
        if at != start + len {
            return Err(format!("range {start:#x}+{len} overrun to {at:#x}"));
        }
    }
    match pieces.next() {
        Some(extra) => Err(format!("ask {extra:?} is outside every range")),
        None => Ok(()),
    }
}

/// The checks on the kernels in `src`: Ok only if every case covers what it must.
fn check(exe: &std::path::Path) -> Result<(), String> {
    let base = |i: u64| (i + 1) << 40;
    let chunk = 1024u64;
    // Lengths: not a multiple of 16 (its tail left out), one unit, none, more pieces than threads.
    let n = [100_000u64, 16, 0, 1 << 20];
    let mut args = vec!["d".to_string(), chunk.to_string(), "3".into()];
    args.extend(n.iter().map(|v| v.to_string()));
    let want: Vec<_> = (0..4).map(|i| (base(i), n[i as usize] & !15)).collect();
    covers(asks(exe, &args), &want, chunk)?;
    // Six experts; 1, 3 and 5 have rows.
    let (up, down) = (80_000u64, 48_016u64);
    let offsets = [0, 0, 2, 2, 3, 3, 5];
    let mut args = vec![
        "e".to_string(),
        chunk.to_string(),
        up.to_string(),
        down.to_string(),
    ];
    args.extend(offsets.iter().map(|v| v.to_string()));
    let mut want = Vec::new();
    for e in [1u64, 3, 5] {
        want.push((base(0) + e * up, up));
        want.push((base(1) + e * down, down));
    }
    covers(asks(exe, &args), &want, chunk)
}

#[test]
fn kernels_ask_for_every_wanted_byte_once_and_planted_ones_are_caught() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let kernels = include_str!("../../kernels/l2.cu");
    let (_, exe) = crate::host_cxx::build(&cxx, "l2", &source(kernels));
    check(&exe).unwrap_or_else(|e| panic!("{e}"));
    let planted = [
        ("at += threads * chunk", "at += (threads + 1) * chunk"),
        (
            "offsets[e + 1] <= offsets[e]",
            "offsets[e + 1] < offsets[e]",
        ),
    ];
    for (from, to) in planted {
        assert!(kernels.contains(from), "l2.cu lost `{from}`");
        let (_, exe) =
            crate::host_cxx::build(&cxx, "l2_plant", &source(&kernels.replace(from, to)));
        assert!(check(&exe).is_err(), "planted `{to}` went uncaught");
    }
}
