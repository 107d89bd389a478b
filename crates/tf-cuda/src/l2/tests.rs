//! The prefetch sites' switch, and kernels/l2.cu compiled for the host (no GPU) under the SIMT
//! emulation with its asks recorded, not sent: every byte wanted is asked for once, nothing
//! else, in whole 16-byte units of at most a chunk; the experts' kernel asks only for the
//! experts with rows. Planted kernels (a stride one chunk too long, empty experts asked for)
//! must fail the same checks. Skipped, with a message, without a C++ compiler.

use super::{blocks, Sites, PIECE};

#[test]
fn sites_parse_unset_as_both_zero_as_none_and_lists() {
    let none = Sites {
        within: false,
        next: false,
        early: false,
        experts: false,
    };
    let both = Sites {
        within: true,
        next: true,
        ..none
    };
    assert_eq!(Sites::parse(None), both);
    assert_eq!(Sites::parse(Some("within, next")), both);
    assert_eq!(Sites::parse(Some("0")), none);
    assert_eq!(Sites::parse(Some("next")), Sites { next: true, ..none });
    let all = Sites::parse(Some("within,next,experts,early"));
    assert_eq!(
        all,
        Sites {
            experts: true,
            early: true,
            ..both
        }
    );
}

#[test]
fn blocks_cover_the_pieces_within_the_cap() {
    let per_block = 128 * PIECE as usize;
    assert_eq!(blocks(0, 132), 1);
    assert_eq!(blocks(per_block, 132), 1);
    assert_eq!(blocks(per_block + 1, 132), 2);
    assert_eq!(blocks(1 << 40, 132), 132);
}

/// Records each ask (address, bytes) in place of the bulk prefetch; runs one case from argv:
/// `d CHUNK BLOCKS N0 N1 N2 N3` (range i at address (i + 1) << 40) or `e CHUNK EACH
/// OFFSETS...` (the stack at 1 << 40); prints `address bytes` a line.
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
    if (argc < 5) return 2;
    auto at = [](int i) { return (const u8*)(uintptr_t)((unsigned long long)(i + 1) << 40); };
    const u32 chunk = (u32)std::stoul(argv[2]);
    if (argv[1][0] == 'd') {
        if (argc < 8) return 2;
        const unsigned blocks = (unsigned)std::stoul(argv[3]);
        u64 n[4];
        for (int i = 0; i < 4; i++) n[i] = std::stoull(argv[4 + i]);
        tf_launch(D3{blocks, 1, 1}, 128, 0, [=] {
            tf_l2_prefetch(at(0), at(1), at(2), at(3), n[0], n[1], n[2], n[3], chunk);
        });
    } else {
        const u64 each = std::stoull(argv[3]);
        std::vector<int> off;
        for (int i = 4; i < argc; i++) off.push_back(std::stoi(argv[i]));
        const int* o = off.data();
        tf_launch(D3{(unsigned)off.size() - 1, 1, 1}, 128, 0, [=] {
            tf_moe_l2_prefetch(at(0), o, each, chunk);
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
    let mut pieces = asks.into_iter();
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

/// The checks on the kernels built into `exe`: Ok only if each asks for what it must.
fn check(exe: &std::path::Path) -> Result<(), String> {
    let chunk = 1024u64;
    // Lengths: not a multiple of 16 (its tail left out), one unit, none, more pieces than threads.
    let n = [100_000u64, 16, 0, 1 << 20];
    let mut args = vec!["d".to_string(), chunk.to_string(), "3".into()];
    args.extend(n.iter().map(|v| v.to_string()));
    let want: Vec<_> = (0..4)
        .map(|i| ((i + 1) << 40, n[i as usize] & !15))
        .collect();
    covers(asks(exe, &args), &want, chunk)?;
    // Six experts of more pieces than a block's threads; 1, 3 and 5 have rows.
    let each = 140_000u64;
    let mut args = vec!["e".to_string(), chunk.to_string(), each.to_string()];
    args.extend([0, 0, 2, 2, 3, 3, 5].map(|v: i32| v.to_string()));
    let want: Vec<_> = [1u64, 3, 5].map(|e| ((1 << 40) + e * each, each)).into();
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
        let planted = source(&kernels.replace(from, to));
        let (_, exe) = crate::host_cxx::build(&cxx, "l2_plant", &planted);
        assert!(check(&exe).is_err(), "planted `{to}` went uncaught");
    }
}
