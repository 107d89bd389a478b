//! The prefetch sites' switch, and kernels/l2.cu compiled for the host (no GPU) under the SIMT
//! emulation with its asks recorded, not sent: every byte wanted is asked for once, nothing
//! else, in whole 16-byte units of at most a chunk. A planted kernel (a stride one chunk too
//! long) must fail the same checks. Skipped, with a message, without a C++ compiler.

use super::{blocks, Sites, PIECE};

#[test]
fn sites_parse_unset_as_both_zero_as_none_and_lists() {
    let none = Sites {
        within: false,
        next: false,
    };
    let both = Sites {
        within: true,
        next: true,
    };
    assert_eq!(Sites::parse(None), both);
    assert_eq!(Sites::parse(Some("within, next")), both);
    assert_eq!(Sites::parse(Some("0")), none);
    assert_eq!(Sites::parse(Some("next")), Sites { next: true, ..none });
    assert_eq!(Sites::parse(Some("within,next,early")), both);
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
/// `CHUNK BLOCKS N0 N1 N2 N3` (range i at address (i + 1) << 40); prints `address bytes` a
/// line.
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
    if (argc < 7) return 2;
    auto at = [](int i) { return (const u8*)(uintptr_t)((unsigned long long)(i + 1) << 40); };
    const u32 chunk = (u32)std::stoul(argv[1]);
    const unsigned blocks = (unsigned)std::stoul(argv[2]);
    u64 n[4];
    for (int i = 0; i < 4; i++) n[i] = std::stoull(argv[3 + i]);
    tf_launch(D3{blocks, 1, 1}, 128, 0, [=] {
        tf_l2_prefetch(at(0), at(1), at(2), at(3), n[0], n[1], n[2], n[3], chunk);
    });
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

/// The check on the kernel built into `exe`: Ok only if it asks for what it must.
fn check(exe: &std::path::Path) -> Result<(), String> {
    let chunk = 1024u64;
    // Lengths: not a multiple of 16 (its tail left out), one unit, none, more pieces than threads.
    let n = [100_000u64, 16, 0, 1 << 20];
    let mut args = vec![chunk.to_string(), "3".into()];
    args.extend(n.iter().map(|v| v.to_string()));
    let want: Vec<_> = (0..4)
        .map(|i| ((i + 1) << 40, n[i as usize] & !15))
        .collect();
    covers(asks(exe, &args), &want, chunk)
}

#[test]
fn kernel_asks_for_every_wanted_byte_once_and_a_planted_one_is_caught() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let kernels = include_str!("../../kernels/l2.cu");
    let (_, exe) = crate::host_cxx::build(&cxx, "l2", &source(kernels));
    check(&exe).unwrap_or_else(|e| panic!("{e}"));
    let (from, to) = ("at += threads * chunk", "at += (threads + 1) * chunk");
    assert!(kernels.contains(from), "l2.cu lost `{from}`");
    let planted = source(&kernels.replace(from, to));
    let (_, exe) = crate::host_cxx::build(&cxx, "l2_plant", &planted);
    assert!(check(&exe).is_err(), "planted `{to}` went uncaught");
}
