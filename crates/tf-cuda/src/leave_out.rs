//! Stage timing without a profiler: a round's graph captured with some kernels left out, so
//! the drop in replay time is what those kernels cost inside the step (ncu times each kernel
//! alone with cold caches, which overstates small ones). Also counts launches by kernel name.
//! Or with some kernels launched twice in a row: the rise is what one more of them costs on the
//! step's path (its work and the hop to it). Outputs of a round with kernels left out or
//! doubled are meaningless; only its timing is.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// What a session leaves out and what it has counted.
struct Session {
    left_out: BTreeSet<String>,
    doubled: BTreeSet<String>,
    counts: BTreeMap<String, usize>,
}

thread_local! {
    static SESSION: RefCell<Option<Session>> = const { RefCell::new(None) };
}

/// From now until [`finish`], this thread counts its launches by kernel name and leaves out
/// the launches of the kernels named in `names` (empty: none).
pub fn start<S: AsRef<str>>(names: &[S]) {
    start_with(names, &[] as &[&str]);
}

/// [`start`], and the launches of the kernels named in `doubled` made twice.
pub fn start_with<S: AsRef<str>, D: AsRef<str>>(names: &[S], doubled: &[D]) {
    let session = Session {
        left_out: names.iter().map(|s| s.as_ref().to_string()).collect(),
        doubled: doubled.iter().map(|s| s.as_ref().to_string()).collect(),
        counts: BTreeMap::new(),
    };
    SESSION.with(|s| *s.borrow_mut() = Some(session));
}

/// Ends this thread's session: its launches (made or left out) by kernel name; empty when
/// none was started.
pub fn finish() -> BTreeMap<String, usize> {
    SESSION.with(|s| s.borrow_mut().take().map(|s| s.counts).unwrap_or_default())
}

/// Whether a launch of `name` is left out, counting it; outside a session, false at once.
pub(crate) fn skipped(name: &str) -> bool {
    SESSION.with(|s| {
        let mut s = s.borrow_mut();
        let Some(s) = s.as_mut() else {
            return false;
        };
        match s.counts.get_mut(name) {
            Some(k) => *k += 1,
            None => {
                s.counts.insert(name.to_string(), 1);
            }
        }
        s.left_out.contains(name)
    })
}

/// Whether a launch of `name` is made twice (not counted again).
pub(crate) fn doubled(name: &str) -> bool {
    SESSION.with(|s| {
        s.borrow()
            .as_ref()
            .is_some_and(|s| s.doubled.contains(name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_out_only_the_named_kernels_and_counts_every_launch() {
        assert!(
            !skipped("tf_rms_norm"),
            "outside a session nothing is left out"
        );
        assert!(finish().is_empty(), "nor counted");
        start(&["tf_rms_norm"]);
        assert!(skipped("tf_rms_norm"));
        assert!(skipped("tf_rms_norm"));
        assert!(
            !skipped("tf_rms_norm_x"),
            "names match exactly, not by prefix"
        );
        let c = finish();
        assert_eq!(c.get("tf_rms_norm"), Some(&2));
        assert_eq!(c.get("tf_rms_norm_x"), Some(&1));
        assert!(!skipped("tf_rms_norm"), "the session is over");
        assert!(finish().is_empty());
    }

    #[test]
    fn doubles_only_the_named_kernels_and_counts_each_launch_once() {
        assert!(
            !doubled("tf_mamba_ssm"),
            "outside a session nothing is doubled"
        );
        start_with(&["tf_rms_norm"], &["tf_mamba_ssm"]);
        assert!(doubled("tf_mamba_ssm") && !skipped("tf_mamba_ssm"));
        assert!(
            !doubled("tf_mamba_ssm_x"),
            "names match exactly, not by prefix"
        );
        assert!(!doubled("tf_rms_norm") && skipped("tf_rms_norm"));
        let c = finish();
        assert_eq!(c.get("tf_mamba_ssm"), Some(&1));
        assert!(!doubled("tf_mamba_ssm"), "the session is over");
    }
}
