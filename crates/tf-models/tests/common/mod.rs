//! The real default model for tests: `$TENSORFOLD_TEST_MODEL`, else the usual download path.
//! Absent, tests print a note and pass, unless `$TENSORFOLD_REQUIRE_MODEL` is set (CI sets it).

pub use tf_testkit::default_model;
