//! Stage timing without a profiler: a round's graph captured with some kernels left out, so
//! the drop in replay time is what those kernels cost inside the step (ncu times each kernel
//! alone with cold caches, which overstates small ones). Also counts launches by kernel name.
//! Outputs of a round with kernels left out are meaningless; only its timing is.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

thread_local! {
    static LEFT_OUT: RefCell<BTreeSet<String>> = const { RefCell::new(BTreeSet::new()) };
    static COUNTS: RefCell<BTreeMap<String, usize>> = const { RefCell::new(BTreeMap::new()) };
}

/// From now on this thread leaves out launches of the kernels named in `names` (empty: none).
pub fn leave_out<S: AsRef<str>>(names: &[S]) {
    LEFT_OUT.with(|l| *l.borrow_mut() = names.iter().map(|s| s.as_ref().to_string()).collect());
}

/// Launches this thread made (or left out) since the last call, by kernel name.
pub fn take_counts() -> BTreeMap<String, usize> {
    COUNTS.with(|c| std::mem::take(&mut *c.borrow_mut()))
}

/// Counts a launch of `name` and says whether it is left out.
pub(crate) fn skipped(name: &str) -> bool {
    COUNTS.with(|c| {
        let mut c = c.borrow_mut();
        match c.get_mut(name) {
            Some(k) => *k += 1,
            None => {
                c.insert(name.to_string(), 1);
            }
        }
    });
    LEFT_OUT.with(|l| !l.borrow().is_empty() && l.borrow().contains(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_out_only_the_named_kernels_and_counts_every_launch() {
        take_counts();
        assert!(!skipped("tf_rms_norm"));
        leave_out(&["tf_rms_norm"]);
        assert!(skipped("tf_rms_norm"));
        assert!(
            !skipped("tf_rms_norm_x"),
            "names match exactly, not by prefix"
        );
        leave_out::<&str>(&[]);
        assert!(!skipped("tf_rms_norm"));
        let c = take_counts();
        assert_eq!(c.get("tf_rms_norm"), Some(&3));
        assert_eq!(c.get("tf_rms_norm_x"), Some(&1));
        assert!(take_counts().is_empty());
    }
}
